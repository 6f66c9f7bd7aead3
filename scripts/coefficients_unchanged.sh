#!/usr/bin/env bash
# Checks that a change keeps every shipped config's coefficients bit-identical: `flopmeter coefficients NAME
# --json` for every model_configs/*.toml under full training, a frozen vision side and full recomputation (with
# the ViT), from two CLIs (a build of the base and one of the change), compared byte for byte.
#   scripts/coefficients_unchanged.sh BASE_CLI NEW_CLI
# Exit 1 and name each file whose output differs. An error message (a text-only model with --recompute-vision)
# is compared like a result.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -ne 2 ]; then
  echo "usage: $0 BASE_CLI NEW_CLI (two builds of tools/flopmeter)" >&2
  exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
snapshot() {  # CLI DIR
  mkdir -p "$2"
  for f in "$root"/model_configs/*.toml; do
    n="$(basename "$f" .toml)"
    "$1" coefficients "$f" --json >"$2/$n.json" 2>&1 || true
    "$1" coefficients "$f" --json --frozen vision >"$2/$n.frozen_vision.json" 2>&1 || true
    "$1" coefficients "$f" --json --recompute full --recompute-vision >"$2/$n.recompute.json" 2>&1 || true
  done
}
snapshot "$1" "$work/base"
snapshot "$2" "$work/new"
status=0
for f in "$work"/base/*; do
  if ! cmp -s "$f" "$work/new/$(basename "$f")"; then
    echo "differs: $(basename "$f")"
    status=1
  fi
done
echo "coefficients_unchanged: $(ls "$work/base" | wc -l) outputs compared"
exit $status
