#!/usr/bin/env bash
# The main job: installs what is missing, builds, runs the term-by-term sanity check over every shipped model
# config, then a short 2-rank training run of the example vision-language model with flopmeter loaded as a
# plugin, and leaves its JSONL metrics and a PNG plot of tok/s and MFU.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/deps.sh
source "$root/scripts/deps.sh"
flopmeter_install_deps

build="${FLOPMETER_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$(nproc)" --target flopmeter_cli flopmeter

echo
echo "== flopmeter check: the exact FLOP model against the Megatron per-token constant, term by term =="
"$build/tools/flopmeter" check
