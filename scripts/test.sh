#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing, configures, builds, runs ctest.
# Usage: scripts/test.sh            (build dir: build/, or $FLOPMETER_BUILD_DIR)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/deps.sh
source "$root/scripts/deps.sh"
flopmeter_install_deps

build="${FLOPMETER_BUILD_DIR:-$root/build}"
jobs="$(nproc)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs" --timeout 600
