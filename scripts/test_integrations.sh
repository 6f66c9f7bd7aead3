#!/usr/bin/env bash
# The integration suite (part of scripts/test.sh): flopmeter.integrations against the real Hugging Face
# transformers Trainer, TRL's SFTTrainer, PEFT and pytorch-lightning, over PyPI's torch 2.x, on the CPU
# (tests/integrations). Debian's torch 1.13 suite (scripts/test_python.sh) is not affected: this one has a venv
# of its own, without system site packages, so the two torches never mix.
#
# The venv (build/venv-integrations) is made from tests/integrations/requirements.txt and reused while that file
# is unchanged (its sha256 is kept in the venv). It is several GiB (PyPI's torch for Linux pulls its CUDA
# wheels even for CPU use); uv installs it with parallel downloads and hard links from its cache (~/.cache/uv),
# so a second fresh clone on the same machine installs it in seconds. Measured on the 2-core CI machine:
# uv, cold cache: 1 min 33 s; pip, cold cache: 11 min 27 s (5.9 GiB installed).
# The package under test is the wheel scripts/test_python.sh built (build/wheels), built here when missing.
#
# Usage: scripts/test_integrations.sh [pytest arguments]   (FLOPMETER_BUILD_DIR as for test_python.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FLOPMETER_BUILD_DIR:-$root/build}"
python=/usr/bin/python3
requirements="$root/tests/integrations/requirements.txt"
venv="$build/venv-integrations"
stamp="$venv/.flopmeter-requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"

if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  start=$(date +%s)
  uv_venv="$build/venv-uv"
  if [ -x "$uv_venv/bin/uv" ] || { "$python" -m venv "$uv_venv" && "$uv_venv/bin/pip" install --quiet uv==0.13.9; }; then
    "$uv_venv/bin/uv" pip install --quiet --python "$venv/bin/python" -r "$requirements"
  else
    echo "test_integrations: uv could not be installed; installing with pip (about 10 minutes)" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  fi
  echo "$want" > "$stamp"
  echo "test_integrations: venv installed in $(( $(date +%s) - start )) s ($(du -sh "$venv" | cut -f1))"
fi

wheel="$(ls "$build"/wheels/flopmeter-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$wheel" ]; then
  "$venv/bin/pip" wheel --quiet --no-deps --wheel-dir "$build/wheels" "$root"
  wheel="$(ls "$build"/wheels/flopmeter-*.whl | head -n1)"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
(cd "$root/tests/integrations" && HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider --durations=12 "$@" .)
