#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing, configures, builds, runs ctest
# and the Python package's pytest suite.
# Usage: scripts/test.sh            (build dir: build/, or $FLOPMETER_BUILD_DIR; sanitizer and fuzz builds
#                                    under $root/build/{asan,tsan,fuzz})
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/deps.sh
source "$root/scripts/deps.sh"
flopmeter_install_deps

build="${FLOPMETER_BUILD_DIR:-$root/build}"
jobs="$(nproc)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$jobs"
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600)

# The Python package: built as a wheel, installed into a venv over Debian's python3-torch, tested with pytest;
# and imported in a venv without torch.
bash "$root/scripts/test_python.sh"

# The integrations (Hugging Face Trainer, TRL, PEFT, Lightning) over PyPI's torch 2.x, in a venv of their own
# cached under build/ (skip with FLOPMETER_SKIP_INTEGRATIONS=1; the first run on a machine downloads ~4 GiB).
if [ "${FLOPMETER_SKIP_INTEGRATIONS:-0}" != 1 ]; then
  bash "$root/scripts/test_integrations.sh"
fi

# Formatting: the C/C++ lines this change adds or modifies follow .clang-format (see the script for what
# "this change" is in a fresh clone).
bash "$root/scripts/check_format.sh"

# Hardening (skip with FLOPMETER_SKIP_HARDENING=1 for a quick local run): the non-torch suite under
# ASan+UBSan and the threaded tests under TSan (build/asan, build/tsan), then every fuzz target for 20 s
# over its corpus and past findings (build/fuzz). Each builds into its own tree under $root/build.
if [ "${FLOPMETER_SKIP_HARDENING:-0}" != 1 ]; then
  bash "$root/scripts/test_sanitizers.sh"
  bash "$root/scripts/fuzz.sh" --smoke
fi
