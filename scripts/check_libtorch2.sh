#!/usr/bin/env bash
# Builds flopmeter against LibTorch 2.x from PyPI and runs its LibTorch tests (the c10d adapter over Gloo, the
# plugin over Gloo, the tensor path, the example model's FLOP agreement and the example trainer). CI builds
# against Debian's LibTorch 1.13 only; this is the check for LibTorch 2.x, for machines that reach PyPI.
#
#   scripts/check_libtorch2.sh            lean: `pip install --no-deps torch`, then only the wheels whose
#                                         libraries LibTorch cannot load from this machine (about 1 GB with a
#                                         CUDA 13 toolkit in /usr/local/cuda, instead of about 4 GB)
#   scripts/check_libtorch2.sh --full     plain `pip install torch` with all of its dependencies
#   scripts/check_libtorch2.sh --python   the Python package instead: the same torch 2.x venv, then the wheel
#                                         scripts/test_python.sh built (build/wheels) with numpy, pytest and
#                                         hypothesis, and tests/python's suite against that torch
#
# Environment: TORCH_SPEC (pip requirement, default "torch"), FLOPMETER_TORCH_VENV (default /tmp/torchvenv),
# FLOPMETER_BUILD_DIR (default build-torch2), JOBS (default nproc), CTEST_REGEX (the tests to run).
#
# Needs: Debian's build dependencies (scripts/deps.sh installs them: spdlog, toml++, GoogleTest and Gloo's
# headers, which the torch wheel does not ship), python3-venv, and a CUDA toolkit (nvcc; /usr/local/cuda is
# used when present): PyPI's torch for Linux x86-64 is a CUDA build, and its CMake config (Caffe2's cuda.cmake)
# refuses to configure without one even for CPU-only use. No GPU is needed: every test here runs on the CPU.
# The wheel's C++ ABI must be the new one (torch >= 2.7 on PyPI); flopmeter's configure stops with a clear
# message for an old-ABI LibTorch (cmake/FlopmeterHelpers.cmake, flopmeter_check_torch_abi).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
full=0
python_only=0
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    --python) python_only=1 ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "check_libtorch2: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

spec="${TORCH_SPEC:-torch}"
venv="${FLOPMETER_TORCH_VENV:-/tmp/torchvenv}"
build="${FLOPMETER_BUILD_DIR:-$root/build-torch2}"
jobs="${JOBS:-$(nproc)}"
tests="${CTEST_REGEX:-^(C10dCommunicator|GlooFromEnv|throughput_gloo|tensor_path|ExampleFlops|ExampleTrainer|example_find_package_demo)}"

# shellcheck source=scripts/deps.sh
source "$root/scripts/deps.sh"
flopmeter_install_deps
if ! python3 -c 'import ensurepip' 2>/dev/null; then
  echo "check_libtorch2: installing python3-venv"
  apt-get install -y -q --no-install-recommends python3-venv
fi
if [ -z "${CUDAToolkit_ROOT:-}" ] && [ -d /usr/local/cuda ]; then export CUDAToolkit_ROOT=/usr/local/cuda; fi
if ! command -v nvcc >/dev/null && [ ! -x "${CUDAToolkit_ROOT:-/nonexistent}/bin/nvcc" ]; then
  echo "check_libtorch2: no CUDA toolkit (nvcc): PyPI's torch is a CUDA build and its CMake config needs one" \
       "even to build CPU code against it; install one or set CUDAToolkit_ROOT" >&2
  exit 1
fi

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
pip=("$py" -m pip install -q --disable-pip-version-check)

if [ "$full" = 1 ]; then
  "${pip[@]}" "$spec"
else
  "${pip[@]}" --no-deps "$spec"
  # The pure-Python requirements `import torch` needs (never the CUDA wheels: those come below, on demand).
  "${pip[@]}" filelock typing-extensions sympy networkx jinja2 fsspec
  # Load LibTorch; for each library the dynamic loader cannot find (or an NCCL older than the one torch was
  # built against), install the wheel torch's own metadata names for it, with torch's pinned version.
  for attempt in $(seq 1 12); do
    if out="$("$py" -c 'import torch' 2>&1)"; then break; fi
    need="$("$py" - "$out" <<'PY'
import re, sys
from importlib.metadata import requires
err = sys.argv[1]
m = re.search(r"(lib[\w.+-]+?\.so[\d.]*): cannot open shared object file", err)
lib = m.group(1) if m else ("libnccl.so" if re.search(r"undefined symbol: nccl", err) else "")
# library -> (word in torch's Requires-Dist, cuda-toolkit extra)
table = [("libcufile", "cufile", "cufile"), ("libcusparseLt", "cusparselt", None), ("libnvshmem", "nvshmem", None),
         ("libnccl", "nccl", None), ("libcudnn", "cudnn", None), ("libcudart", "cuda-runtime", "cudart"),
         ("libcupti", "cupti", "cupti"), ("libcublas", "cublas", "cublas"), ("libcufft", "cufft", "cufft"),
         ("libcusparse", "cusparse", "cusparse"), ("libcusolver", "cusolver", "cusolver"),
         ("libnvrtc", "nvrtc", "nvrtc"), ("libnvJitLink", "nvjitlink", "nvjitlink"), ("libcurand", "curand", "curand"),
         ("libnvToolsExt", "nvtx", "nvtx")]
reqs = [r.split(";")[0].strip() for r in (requires("torch") or []) if "extra ==" not in r]
for prefix, word, extra in table:
    if not lib.startswith(prefix) or (prefix == "libcusparse" and lib.startswith("libcusparseLt")):
        continue
    for r in reqs:
        name = re.split(r"[\[<>=!~ ]", r, 1)[0]
        if word == "cusparse" and "cusparselt" in name.lower():
            continue
        if word in name.lower() or (extra and name == "cuda-toolkit"):
            if name == "cuda-toolkit":  # torch >= 2.9: one meta package with an extra per library
                print("cuda-toolkit[%s]%s" % (extra, r[r.index("]") + 1:] if "]" in r else r[len(name):]))
            else:
                print(r)
            sys.exit(0)
print("")
PY
)"
    if [ -z "$need" ]; then
      echo "check_libtorch2: 'import torch' fails and no wheel is known for it:" >&2
      echo "$out" | tail -3 >&2
      echo "check_libtorch2: rerun with --full" >&2
      exit 1
    fi
    echo "check_libtorch2: LibTorch needs $need"
    case "$need" in
      cuda-toolkit*) "${pip[@]}" "$need" ;;  # the meta package: its extra brings the one nvidia-* wheel
      *) "${pip[@]}" --no-deps "$need" ;;
    esac
  done
  if ! out="$("$py" -c 'import torch' 2>&1)"; then
    echo "$out" | tail -3 >&2
    echo "check_libtorch2: 'import torch' still fails; rerun with --full" >&2
    exit 1
  fi
fi

if [ "$python_only" = 1 ]; then
  # One wheel for every torch: the one the suite built against Debian's 1.13, installed unchanged here.
  wheel="$(ls "$root"/build/wheels/flopmeter-*.whl 2>/dev/null | head -1)"
  if [ -z "$wheel" ]; then
    echo "check_libtorch2: no wheel in build/wheels (run scripts/test_python.sh first)" >&2
    exit 1
  fi
  "${pip[@]}" numpy pytest hypothesis
  "${pip[@]}" --force-reinstall --no-deps "$wheel"
  "$py" -c 'import torch; print("check_libtorch2: torch", torch.__version__)'
  (cd "$root/tests/python" && "$py" -m pytest -q -p no:cacheprovider .)
  exit 0
fi

info="$("$py" -c 'import torch; print(torch.__version__, int(torch._C._GLIBCXX_USE_CXX11_ABI), torch.utils.cmake_prefix_path)')"
read -r version abi prefix <<<"$info"
echo "check_libtorch2: torch $version, _GLIBCXX_USE_CXX11_ABI=$abi, CMake prefix $prefix"
if [ "$abi" != 1 ]; then
  echo "check_libtorch2: this torch uses the old C++ ABI; flopmeter's configure will refuse it (see above)" >&2
fi

generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix" \
      -DFLOPMETER_BUILD_EXAMPLES=ON -DFLOPMETER_BUILD_BENCH=OFF
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs" --timeout 600 -R "$tests"
echo "check_libtorch2: flopmeter's LibTorch tests pass against torch $version"
