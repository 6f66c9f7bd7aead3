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

echo
echo "== a short 2-rank training run of the example VLM with flopmeter dlopen'ed as a plugin =="
cmake --build "$build" -j "$(nproc)" --target vlm_trainer
run_dir="$build/demo"
rm -rf "$run_dir"   # flopmeter's JSONL sink appends: start clean
mkdir -p "$run_dir"
(cd "$run_dir" && "$root/examples/launch.sh" 2 "$build/examples/vlm_trainer" --config "$root/examples/trainer.toml")
jsonl="$run_dir/out/vlm_trainer/flopmeter_0.jsonl"
png="$run_dir/out/vlm_trainer/throughput.png"
"$root/scripts/plot_metrics.sh" "$jsonl" "$png" >/dev/null
echo
echo "flopmeter metrics (JSONL): $jsonl"
echo "flopmeter metrics (TensorBoard event files; view with: tensorboard --logdir $run_dir/out/vlm_trainer/tensorboard):"
ls -d "$run_dir"/out/vlm_trainer/tensorboard/rank*
echo "plot of tok/s and MFU over steps (PNG): $png"
