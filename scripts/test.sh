#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing, configures, builds, runs ctest
# and the Python package's pytest suite.
# Usage: scripts/test.sh            (build dir: build/, or $FLOPMETER_BUILD_DIR; sanitizer and fuzz builds
#                                    under $root/build/{asan,tsan,fuzz})
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/deps.sh
source "$root/scripts/deps.sh"

# Each phase says how long it took, so that a slow CI run shows where its time went (CI allows 35 minutes).
phase_start=$SECONDS
phase_done() { echo "flopmeter: phase '$1' took $((SECONDS - phase_start)) s (total $SECONDS s)"; phase_start=$SECONDS; }

flopmeter_install_deps
phase_done "install dependencies"

build="${FLOPMETER_BUILD_DIR:-$root/build}"
jobs="$(nproc)"
# Line tables only (-g1) instead of full debug info: a crash or a sanitizer report still names file:line, and the
# LibTorch-heavy files compile in half the time (tests/test_tensor_path.cpp: 32 s of CPU with -g1, 62 s with -g).
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
cmake --build "$build" -j "$jobs"
phase_done "configure and build"
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600)
phase_done "ctest"

# The Python package: built as a wheel, installed into a venv over Debian's python3-torch, tested with pytest;
# and imported in a venv without torch.
bash "$root/scripts/test_python.sh"
phase_done "python package"

# The integrations (Hugging Face Trainer, TRL, PEFT, Lightning) over PyPI's torch 2.x, in a venv of their own
# cached under build/ (skip with FLOPMETER_SKIP_INTEGRATIONS=1; the first run on a machine downloads ~4 GiB).
if [ "${FLOPMETER_SKIP_INTEGRATIONS:-0}" != 1 ]; then
  bash "$root/scripts/test_integrations.sh"
  phase_done "integrations"
fi

# Formatting: the C/C++ lines this change adds or modifies follow .clang-format (see the script for what
# "this change" is in a fresh clone).
bash "$root/scripts/check_format.sh"
phase_done "format check"

# Hardening (skip with FLOPMETER_SKIP_HARDENING=1 for a quick local run): the non-torch suite under
# ASan+UBSan and the threaded tests under TSan (build/asan, build/tsan), then every fuzz target for 20 s
# over its corpus and past findings (build/fuzz). Each builds into its own tree under $root/build.
if [ "${FLOPMETER_SKIP_HARDENING:-0}" != 1 ]; then
  bash "$root/scripts/test_sanitizers.sh"
  phase_done "sanitizers"
  bash "$root/scripts/fuzz.sh" --smoke
  phase_done "fuzz smoke"
fi
