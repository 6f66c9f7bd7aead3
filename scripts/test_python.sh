#!/usr/bin/env bash
# The Python package's suite (part of scripts/test.sh): builds the wheel once with `pip wheel` (scikit-build-core
# from PyPI drives CMake: the C++ core without LibTorch, the CLI, the shipped configs), installs it into a venv
# over Debian's python3-torch, numpy, pytest and hypothesis (/usr/bin/python3 -m venv --system-site-packages)
# and runs pytest on tests/python; then installs the same wheel into a venv with neither torch nor numpy and
# uses the FLOP model there.
# Usage: scripts/test_python.sh   (venvs and wheels under $FLOPMETER_BUILD_DIR, default build/)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FLOPMETER_BUILD_DIR:-$root/build}"
python=/usr/bin/python3  # Debian's packages belong to it; `python3` on PATH may be another interpreter

venv="$build/venv-python"
[ -x "$venv/bin/python" ] || "$python" -m venv --system-site-packages "$venv"
rm -rf "$build/wheels"
"$venv/bin/pip" wheel --quiet --no-deps --wheel-dir "$build/wheels" "$root"
wheel="$(ls "$build"/wheels/flopmeter-*.whl)"
"$venv/bin/pip" install --quiet --force-reinstall --no-deps "$wheel"
# test_kill.py reads the event files with TensorBoard's own reader from the venv ctest's test_tensorboard made.
export FLOPMETER_TENSORBOARD_PYTHON="$build/tensorboard-venv/bin/python"
(cd "$root/tests/python" && "$venv/bin/python" -m pytest -q -p no:cacheprovider --durations=12 .)

# No torch, no numpy: `import flopmeter` and the FLOP model still work (the package must coexist with any
# torch, or none).
bare="$build/venv-bare"
[ -x "$bare/bin/python" ] || "$python" -m venv "$bare"
"$bare/bin/pip" install --quiet --force-reinstall --no-deps "$wheel"
(cd / && "$bare/bin/python" -c "
import importlib.util, sys
assert importlib.util.find_spec('torch') is None and importlib.util.find_spec('numpy') is None, 'not a bare venv'
import flopmeter
c = flopmeter.FlopModel('qwen3_vl_2b').coefficients
assert c['dense_per_token'] == 10322706432, c
assert flopmeter.FlopModel('qwen3_vl_2b').flops(document_lengths=[3, 5]) > 0
with flopmeter.Meter(model='tiny_vlm', peak={'tflops_per_gpu': 1.0}, sinks={'console': False}) as meter:
    meter.on_microbatch(cu_seqlens=[0, 4, 9], samples=2)
    meter.on_log(1)
    assert meter.flush()['train/tokens_seen'] == 9
assert 'torch' not in sys.modules
print('flopmeter', flopmeter.__version__, 'without torch or numpy: ok')
")
