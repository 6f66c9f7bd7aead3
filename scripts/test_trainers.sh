#!/usr/bin/env bash
# The trainers suite: flopmeter's zero-code entries against trainers whose pins cannot share the integration venv
# (tests/trainers: verl, through its `verl.plugins` entry point alone). Its own venv (build/venv-trainers, no
# system site packages), made from tests/trainers/requirements.txt with uv and reused while that file is
# unchanged; the package under test is the wheel scripts/test_python.sh built (build/wheels), built here when
# missing. Run it before every stop; it is not part of scripts/test.sh (the venv is 6 GiB with verl's Ray).
# Measured on the 2-core machine with uv's cache warm: venv 10 s, suite about 1 min.
#
# Usage: scripts/test_trainers.sh [pytest arguments]   (FLOPMETER_BUILD_DIR as for test_python.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FLOPMETER_BUILD_DIR:-$root/build}"
python=/usr/bin/python3
requirements="$root/tests/trainers/requirements.txt"
venv="$build/venv-trainers"
stamp="$venv/.flopmeter-requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"

if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  start=$(date +%s)
  uv_venv="$build/venv-uv"
  [ -x "$uv_venv/bin/uv" ] || { "$python" -m venv "$uv_venv" && "$uv_venv/bin/pip" install --quiet uv==0.13.9; }
  "$uv_venv/bin/uv" pip install --quiet --python "$venv/bin/python" -r "$requirements"
  echo "$want" > "$stamp"
  echo "test_trainers: venv installed in $(( $(date +%s) - start )) s ($(du -sh "$venv" | cut -f1))"
fi

wheel="$(ls "$build"/wheels/flopmeter-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$wheel" ]; then
  "$venv/bin/pip" wheel --quiet --no-deps --wheel-dir "$build/wheels" "$root"
  wheel="$(ls "$build"/wheels/flopmeter-*.whl | head -n1)"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
(cd "$root/tests/trainers" && HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider --durations=8 "$@" .)
