#!/usr/bin/env bash
# Builds and runs the benchmarks, and prints the targets as ratios measured in this one run:
#   on_microbatch (32768-token row, 11 documents, 8 images): ns per call and heap allocations per call;
#   on_log over 4 Gloo ranks against a bare 1-element Gloo all-reduce (and one of on_log's payload).
# Speed targets live here, not in tests: timings depend on the machine and its load.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/deps.sh
source "$root/scripts/deps.sh"
flopmeter_install_deps
build="${FLOPMETER_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFLOPMETER_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target bench_on_microbatch bench_on_log
out="$build/bench-results"
mkdir -p "$out"
"$build/bench/bench_on_microbatch" --benchmark_format=json --benchmark_out="$out/on_microbatch.json" \
  --benchmark_out_format=json --benchmark_min_time=0.5 >/dev/null
"$build/bench/bench_on_log" --benchmark_out="$out/on_log.json" --benchmark_out_format=json >/dev/null
awk -f - "$out/on_microbatch.json" "$out/on_log.json" <<'AWK'
/"name":/          { gsub(/[",]/, "", $2); name = $2 }
/"real_time":/     { gsub(/,/, "", $2); time[name] = $2 }
/"time_unit":/     { gsub(/[",]/, "", $2); unit[name] = $2 }
/"allocs_per_call":/ { gsub(/,/, "", $2); allocs[name] = $2 }
END {
  for (n in time) if (n ~ /on_microbatch/) printf "%-52s %10.1f %s   heap allocations per call: %s\n", n, time[n], unit[n], allocs[n]
  bare = ""; payload = ""; log = ""
  for (n in time) {
    if (n ~ /bare_allreduce\/2000\/1\//) bare = time[n]
    else if (n ~ /bare_allreduce/) payload = time[n]
    else if (n ~ /on_log/) log = time[n]
  }
  printf "on_log over 4 Gloo ranks: %.1f us; bare 1-element all-reduce: %.1f us; bare all-reduce of on_log's payload: %.1f us\n", log, bare, payload
  printf "ratio on_log / bare 1-element all-reduce: %.2f (target <= 2)\n", log / bare
  printf "ratio on_log / bare same-payload all-reduce: %.2f\n", log / payload
}
AWK
