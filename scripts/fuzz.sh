#!/usr/bin/env bash
# Builds flopmeter's libFuzzer targets with clang into build/fuzz and runs them.
#   scripts/fuzz.sh --smoke [SECONDS]     every target over its corpus for SECONDS (default 20), all at once;
#                                         part of the test suite (scripts/test.sh)
#   scripts/fuzz.sh --run TARGET [ARGS]   one target, with libFuzzer ARGS (e.g. -runs=10000000 or
#                                         -max_total_time=600); new inputs go to build/fuzz/corpus/TARGET
#   scripts/fuzz.sh --merge TARGET        add to tests/fuzz_corpus/TARGET the smallest set of inputs from
#                                         build/fuzz/corpus/TARGET that covers what they cover (-merge=1)
#   scripts/fuzz.sh --build               only build
# Targets: fuzz_model_config, fuzz_plugin_config, fuzz_cli_batch, fuzz_microbatch, fuzz_hf_config, fuzz_c_api,
# fuzz_model_abi
# (sources in fuzz/).
#
# tests/fuzz_corpus/TARGET/ holds the seed corpus (hand-written seed-* files plus inputs kept by --merge,
# minimised with -merge=1) and the reproducers of past findings (regression-*). A run reads that directory but never writes to it: libFuzzer
# adds new inputs only to the first corpus directory it is given, build/fuzz/corpus/TARGET. Every run first
# executes every input of both directories, so the reproducers are replayed each time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FLOPMETER_FUZZ_BUILD_DIR:-$root/build/fuzz}"
targets=(fuzz_model_config fuzz_plugin_config fuzz_cli_batch fuzz_microbatch fuzz_hf_config)
targets+=(fuzz_c_api)  # the C ABI's event structs, handles and health struct (fuzz/fuzz_c_api.cpp)
targets+=(fuzz_model_abi)  # the C ABI's FLOP model and plugin-from-text functions (fuzz/fuzz_model_abi.cpp)
jobs="$(nproc)"

# -timeout: an input that runs 10 s is a hang; -rss_limit_mb: a runaway allocation is a finding, not a
# swapping machine. LeakSanitizer is on (ASan's default), so a leak fails the run too.
common_flags=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1)

build() {
  local cxx="${CXX_FUZZ:-}"
  if [ -z "$cxx" ]; then
    for candidate in clang++ clang++-14; do
      if command -v "$candidate" >/dev/null; then cxx="$candidate"; break; fi
    done
  fi
  if [ -z "$cxx" ]; then
    echo "flopmeter: fuzzing needs clang++ and libFuzzer (Debian: clang libclang-rt-14-dev)" >&2
    exit 1
  fi
  # Line tables only: a finding's stack still names file:line, and the build is faster (scripts/test.sh).
  cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG" \
    -DFLOPMETER_BUILD_FUZZ=ON -DFLOPMETER_BUILD_TESTS=OFF -DFLOPMETER_BUILD_BENCH=OFF \
    -DFLOPMETER_BUILD_EXAMPLES=OFF -DFLOPMETER_WITH_TORCH=OFF -DFLOPMETER_WITH_NCCL=OFF >/dev/null
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
}

run_one() {  # run_one TARGET [libFuzzer args...]
  local target="$1"
  shift
  local extra=()
  # The TOML targets get the schemas' key names and values (fuzz/toml.dict): reaching a semantic check needs
  # a well-formed key, which random mutation rarely spells.
  # fuzz_microbatch: 512 bytes already make dozens of micro-batches and logs (more than the 16 logs a
  # backed-off probe needs); longer inputs repeat events and divide the executions per second.
  case "$target" in
    fuzz_model_config | fuzz_plugin_config) extra=(-dict="$root/fuzz/toml.dict") ;;
    fuzz_microbatch) extra=(-max_len=512) ;;
    # config.json: JSON syntax and the Hugging Face field names (fuzz/json.dict); real configs are 2-5 KB.
    fuzz_hf_config) extra=(-dict="$root/fuzz/json.dict" -max_len=8192) ;;
    # fuzz_c_api: the C ABI's own refusals log on the plugin's private stderr logger; -close_fd_mask=2 keeps
    # that out of the run's log (libFuzzer and the sanitizers report through a copy of stderr).
    fuzz_c_api) extra=(-max_len=1024 -close_fd_mask=2) ;;
    fuzz_model_abi) extra=(-max_len=4096 -close_fd_mask=2) ;;
  esac
  mkdir -p "$build/corpus/$target" "$build/artifacts/$target"
  "$build/fuzz/$target" "${common_flags[@]}" "${extra[@]}" -artifact_prefix="$build/artifacts/$target/" "$@" \
    "$build/corpus/$target" "$root/tests/fuzz_corpus/$target"
}

smoke() {
  local seconds="$1"
  local pids=() failed=0
  for t in "${targets[@]}"; do
    run_one "$t" -max_total_time="$seconds" >"$build/$t.smoke.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!targets[@]}"; do
    if wait "${pids[$i]}"; then
      echo "flopmeter: ${targets[$i]}: $(grep -o 'stat::number_of_executed_units: [0-9]*' "$build/${targets[$i]}.smoke.log" |
        awk '{print $2}') executions in ${seconds} s, no finding"
    else
      failed=1
      echo "flopmeter: ${targets[$i]} FAILED; its log:" >&2
      tail -n 60 "$build/${targets[$i]}.smoke.log" >&2
    fi
  done
  return "$failed"
}

case "${1:-}" in
  --smoke)
    build
    smoke "${2:-20}"
    ;;
  --run)
    [ $# -ge 2 ] || { echo "usage: $0 --run TARGET [libFuzzer args]" >&2; exit 2; }
    build
    target="$2"
    shift 2
    run_one "$target" "$@"
    ;;
  --merge)
    [ $# -eq 2 ] || { echo "usage: $0 --merge TARGET" >&2; exit 2; }
    build
    corpus="$root/tests/fuzz_corpus/$2"
    tmp="$(mktemp -d)"
    # The readable seeds (seed-*) and the reproducers (regression-*) stay as they are; libFuzzer adds to
    # them the smallest set of other inputs that covers what the rest of both corpora cover.
    find "$corpus" -maxdepth 1 -type f \( -name 'seed-*' -o -name 'regression-*' \) -exec cp {} "$tmp"/ \;
    "$build/fuzz/$2" -merge=1 "$tmp" "$corpus" "$build/corpus/$2"
    find "$corpus" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'regression-*' -delete
    find "$tmp" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'regression-*' -exec cp {} "$corpus"/ \;
    rm -rf "$tmp"
    du -sh "$corpus"
    ;;
  --build)
    build
    ;;
  *)
    echo "usage: $0 --smoke [SECONDS] | --run TARGET [ARGS] | --merge TARGET | --build" >&2
    exit 2
    ;;
esac
