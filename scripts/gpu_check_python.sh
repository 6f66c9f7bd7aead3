#!/usr/bin/env bash
# The Python package's GPU check: installs the package from this tree against the GPU
# machine's own PyTorch and runs tests/python/test_cuda.py there, which
#   - feeds Meter CUDA tensors (cu_seqlens int32, grid_thw int64, the loss sum and label count on the device)
#     under torch.cuda.set_sync_debug_mode("error") around every on_microbatch: the device path's non_blocking
#     copies into pinned memory, its CUDA event and the event queries of later hooks must not synchronise
#     (any host-device sync raises);
#   - checks the exact FLOPs of each batch's copies, counted on the host, against the host path's, and the
#     records of the CUDA meter against a CPU meter fed the same batches (counts exact, FLOPs per token to
#     1e-12);
#   - checks a malformed CUDA batch is refused when its copy arrives and counted as bad;
#   - prints perf/log_wait_ms of every record.
# Exits non-zero when anything fails, or when torch sees no CUDA device (unless --dry-run). Not part of CI.
#
# Two steps, because a GPU machine here reaches no package registry (as scripts/gpu_check.sh):
#   1. On a Debian 12 machine with apt (the development machine):
#        scripts/gpu_check.sh --fetch-deps
#      puts the Debian packages the core library builds against (spdlog, fmt, toml++, nlohmann-json, ...) in
#      .gpu-deps/ (git-ignored).
#   2. On the GPU machine, from the repository root, with .gpu-deps/ beside it (device tool: carry [".gpu-deps"]):
#        bash scripts/gpu_check_python.sh
#      The packages are unpacked under the work directory (never into /); the build uses the machine's own
#      scikit-build-core, CMake and ninja (pip --no-index --no-build-isolation: nothing is fetched).
#
# The package goes into a directory of its own on PYTHONPATH (pip --target), not a venv: the GPU machine's
# python3 is itself a venv (/opt/torch/.venv), and a venv made over it would not see its torch.
#
# Options: --dry-run (for a machine without a GPU: installs nothing, runs the test with the python given,
# which must skip cleanly), --keep (leave the work directory). Environment: PYTHON (default python3: the one
# whose torch is used), JOBS (default nproc). Results are printed, and copied to $OUT when set.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps_dir="$root/.gpu-deps"

dry_run=0
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,30p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check_python: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

py="${PYTHON:-python3}"
jobs="${JOBS:-$(nproc)}"
out="${OUT:-}"
work="$(mktemp -d /tmp/flopmeter-gpu-check-python.XXXXXX)"
results=()
failed=0
pass() { results+=("PASS  $1"); echo "gpu_check_python: PASS  $1"; }
fail() { results+=("FAIL  $1"); echo "gpu_check_python: FAIL  $1" >&2; failed=1; }
finish() {
  echo
  echo "==== gpu_check_python summary ===="
  for r in "${results[@]}"; do echo "  $r"; done
  if [ -n "$out" ] && [ -d "$out" ]; then cp -f "$work"/*.log "$out"/ 2>/dev/null || true; fi
  if [ "$keep" = 0 ]; then rm -rf "$work"; else echo "gpu_check_python: work directory $work"; fi
  if [ "$failed" = 0 ]; then echo "gpu_check_python: all passed"; else echo "gpu_check_python: FAILED" >&2; fi
  exit "$failed"
}

# ---- PyTorch and CUDA ----------------------------------------------------------------------------------------
if ! info="$("$py" -c 'import sys, torch
print(torch.__version__, int(torch.cuda.is_available()), torch.version.cuda, "%d.%d" % sys.version_info[:2])' 2>&1)"; then
  echo "$info" >&2
  fail "PyTorch: '$py -c import torch' failed (set PYTHON to the python whose torch to use)"
  finish
fi
read -r torch_version has_cuda cuda_version python_version <<<"$(echo "$info" | tail -1)"
echo "gpu_check_python: Python $python_version, torch $torch_version (CUDA $cuda_version, available $has_cuda)"
if [ "$has_cuda" != 1 ] && [ "$dry_run" = 0 ]; then
  fail "CUDA: torch.cuda.is_available() is False on this machine (--dry-run to check the script without a GPU)"
  finish
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

# ---- install -------------------------------------------------------------------------------------------------
if [ "$dry_run" = 0 ]; then
  if compgen -G "$deps_dir/*.deb" >/dev/null; then
    sysroot="$work/deps-sysroot"
    mkdir -p "$sysroot"
    for deb in "$deps_dir"/*.deb; do
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$deb" "$sysroot"
      else
        (cd "$work" && ar x "$deb" && tar -xf data.tar.* -C "$sysroot" && rm -f data.tar.* control.tar.* debian-binary)
      fi
    done
    # find_package reads CMAKE_PREFIX_PATH from the environment; the loader finds the unpacked shared
    # libraries (spdlog, fmt, toml++) through LD_LIBRARY_PATH, also if the install's RPATH does not name them.
    export CMAKE_PREFIX_PATH="$sysroot/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    export LD_LIBRARY_PATH="$sysroot/usr/lib/x86_64-linux-gnu:$sysroot/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "gpu_check_python: Debian packages from .gpu-deps unpacked in $sysroot"
  fi
  export CMAKE_BUILD_PARALLEL_LEVEL="$jobs"
  if ! "$py" -m pip install --no-index --no-build-isolation --no-deps --no-cache-dir --disable-pip-version-check \
        --target "$work/site" --config-settings=build-dir="$work/build" "$root" >"$work/install.log" 2>&1; then
    tail -40 "$work/install.log" >&2
    fail "pip install of the package against torch $torch_version (log: install.log)"
    finish
  fi
  export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
  pass "pip install of the package (core built without LibTorch) for Python $python_version"
fi
if ! where="$("$py" -c 'import flopmeter; print(flopmeter.__file__, flopmeter.__version__)' 2>&1)"; then
  echo "$where" >&2
  fail "import flopmeter"
  finish
fi
echo "gpu_check_python: flopmeter from $where"

# ---- the CUDA test -------------------------------------------------------------------------------------------
# From the work directory, so that pytest's and Hypothesis' caches land there and not in the tree.
set +e
(cd "$work" && PYTHONUNBUFFERED=1 "$py" -m pytest -v -rs -p no:cacheprovider "$root/tests/python/test_cuda.py" "$root/tests/python/test_watch_cuda.py" 2>&1) |
  tee "$work/test_cuda.log"
rc=${PIPESTATUS[0]}
set -e
# Without CUDA the module skips itself whole: pytest then collects nothing and exits 5.
if [ "$has_cuda" != 1 ] && [ "$rc" = 5 ] && grep -q "no CUDA device" "$work/test_cuda.log"; then rc=0; fi
if [ "$rc" != 0 ]; then
  fail "tests/python/test_cuda.py (pytest exit $rc; log: test_cuda.log)"
elif [ "$has_cuda" = 1 ]; then
  if grep -q "SKIPPED\|skipped" "$work/test_cuda.log"; then
    fail "tests/python/test_cuda.py skipped something on a machine with CUDA"
  else
    pass "tests/python/test_cuda.py on CUDA: no sync on the micro-batch path, records equal to the CPU path"
  fi
  grep "perf/log_wait_ms" "$work/test_cuda.log" || true
else
  pass "tests/python/test_cuda.py without CUDA: skipped cleanly (--dry-run)"
fi
finish
