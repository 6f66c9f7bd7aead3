#!/usr/bin/env bash
# Builds and runs the benchmarks, and prints the targets as ratios measured in this one run:
#   on_microbatch (32768-token row, 11 documents, 8 images): ns per call and heap allocations per call;
#   on_log over 4 Gloo ranks against a bare 1-element Gloo all-reduce (and one of on_log's payload);
#   the positions scan (int64 and int32, each kernel) against a plain sum over the same array: ns per token
#   and the ratio (target <= 1.5 for the kernel count_from_positions uses);
#   the per-log derivation (rows -> metrics record, top-k included) at 1,024, 16,384 and 131,072 ranks:
#   CPU time per derivation against the 1 ms goal at 16,384 ranks, and how it grows (linear: ratio ~8);
#   Python Meter.on_microbatch (same row, cu_seqlens and position_ids CPU tensors) against the reference
#   trainer's torch ops, side by side (bench/python_on_microbatch.py; goals >= 20x and >= 5x), in a venv over
#   Debian's python3-torch with the package installed from this tree ($FLOPMETER_PYTHON: a Python that already
#   has torch and flopmeter, used as it is).
# Speed targets live here, not in tests: timings depend on the machine and its load.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/deps.sh
source "$root/scripts/deps.sh"
flopmeter_install_deps
build="${FLOPMETER_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFLOPMETER_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target bench_on_microbatch bench_on_log bench_positions_scan bench_derive
out="$build/bench-results"
mkdir -p "$out"
"$build/bench/bench_on_microbatch" --benchmark_format=json --benchmark_out="$out/on_microbatch.json" \
  --benchmark_out_format=json --benchmark_min_time=0.5 >/dev/null
"$build/bench/bench_on_log" --benchmark_out="$out/on_log.json" --benchmark_out_format=json >/dev/null
"$build/bench/bench_positions_scan" --benchmark_out="$out/positions_scan.json" --benchmark_out_format=json \
  --benchmark_min_time=0.5 >/dev/null
"$build/bench/bench_derive" --benchmark_out="$out/derive.json" --benchmark_out_format=json \
  --benchmark_min_time=0.5 >/dev/null
# CPU time: the machine may be shared, and the derivation is single-threaded host work.
awk '/"name":/ { gsub(/[",]/, "", $2); name = $2 }
     /"cpu_time":/ { gsub(/,/, "", $2); cpu[name] = $2 }
     END {
       a = cpu["BM_derive/1024"]; b = cpu["BM_derive/16384"]; c = cpu["BM_derive/131072"]
       printf "derive at 1,024 / 16,384 / 131,072 ranks: %.0f / %.0f / %.0f us CPU (%.1f / %.1f / %.1f ns per rank)\n", a, b, c, a * 1000 / 1024, b * 1000 / 16384, c * 1000 / 131072
       printf "derive at 16,384 ranks: %.3f ms (goal <= 1 ms); growth 1k->16k %.1fx (linear: 16), 16k->128k %.1fx (linear: 8)\n", b / 1000, b / a, c / b
     }' "$out/derive.json"
awk -f - "$out/on_microbatch.json" "$out/on_log.json" <<'AWK'
/"name":/          { gsub(/[",]/, "", $2); name = $2 }
/"real_time":/     { gsub(/,/, "", $2); time[name] = $2 }
/"time_unit":/     { gsub(/[",]/, "", $2); unit[name] = $2 }
/"allocs_per_call":/ { gsub(/,/, "", $2); allocs[name] = $2 }
END {
  for (n in time) if (n ~ /on_microbatch/) printf "%-52s %10.1f %s   heap allocations per call: %s\n", n, time[n], unit[n], allocs[n]
  bare = ""; payload = ""; log_gap = ""; log_b2b = ""
  for (n in time) {
    if (n ~ /bare_allreduce\/2000\/1\//) bare = time[n]
    else if (n ~ /bare_allreduce/) payload = time[n]
    else if (n ~ /on_log_4_ranks\/2000\/0\//) log_b2b = time[n]
    else if (n ~ /on_log_4_ranks/) log_gap = time[n]
  }
  printf "bare 1-element Gloo all-reduce (4 ranks): %.1f us; bare all-reduce of on_log's buffer (4 x 21 doubles): %.1f us\n", bare, payload
  printf "on_log with 20 ms of training between logs (the hook's cost in a loop): %.1f us -> ratio to the bare 1-element all-reduce %.2f (target <= 2)\n", log_gap, log_gap / bare
  printf "on_log back to back (each waits for the previous collective): %.1f us -> %.2f x the bare all-reduce of the same payload\n", log_b2b, log_b2b / payload
}
AWK
# The positions scan: ns per token of each benchmark (its ns_per_token counter, in seconds in the JSON) and
# the ratio to the plain sum over the same array (same element type and length).
echo "positions scan vs a plain sum over the same array (ns per token; ratio, target <= 1.5):"
awk -f - "$out/positions_scan.json" <<'AWK' | sort -k1,1 -k2,2n -k4
/"name":/          { gsub(/[",]/, "", $2); name = $2 }
/"ns_per_token":/  { gsub(/,/, "", $2); per_token[name] = $2 * 1e9 }
/"label":/         { gsub(/[",]/, "", $2); label[name] = $2 }
END {
  for (n in per_token) {
    split(n, parts, "/"); tokens = parts[length(parts)]
    type = (n ~ /int32/) ? "int32" : "int64"
    if (n ~ /plain_sum/) sum[type "/" tokens] = per_token[n]
  }
  for (n in per_token) {
    if (n ~ /plain_sum/) continue
    split(n, parts, "/"); tokens = parts[length(parts)]
    type = (n ~ /int32/) ? "int32" : "int64"
    what = (n ~ /count_from_positions/) ? "count_from_positions (dispatch)" : "scan, kernel " label[n]
    printf "  %s %8d tokens  %-34s %6.3f ns/token   plain sum %6.3f   ratio %5.2f\n", type, tokens, what, per_token[n], sum[type "/" tokens], per_token[n] / sum[type "/" tokens]
  }
}
AWK
# Attention windows, each against the full-attention case of the same run (issue 30's targets: on_microbatch
# with cu_seqlens for a model with windows <= 1.15x the full-attention model; the positions scan with one window
# <= 1.3x the scan without). The same ratios in instructions: python3 bench/hot_path_instructions.py.
echo "attention windows against full attention, and recompute against none, same run (ns; ratio):"
awk -f - "$out/on_microbatch.json" "$out/positions_scan.json" <<'AWK'
/"name":/          { gsub(/[",]/, "", $2); name = $2 }
/"real_time":/     { gsub(/,/, "", $2); time[name] = $2 }
/"label":/         { line = $0; sub(/.*"label": "/, "", line); sub(/",?[ \t]*$/, "", line); label[name] = line }
END {
  none = time["BM_on_microbatch_recompute/0"]
  for (k = 1; k <= 2; ++k) {
    n = "BM_on_microbatch_recompute/" k
    if (n in time) printf "  on_microbatch cu_seqlens qwen3_vl_2b %-36s %8.1f ns vs recompute none %8.1f ns: ratio %5.2f (target ~1: coefficients, not counts)\n", label[n], time[n], none, time[n] / none
  }
  full = time["BM_on_microbatch_windows/0"]
  for (k = 1; k <= 3; ++k) {
    n = "BM_on_microbatch_windows/" k
    if (n in time) printf "  on_microbatch cu_seqlens %-36s %8.1f ns vs full attention %8.1f ns: ratio %5.2f (target <= 1.15)\n", label[n], time[n], full, time[n] / full
  }
  split("int64 int32", types, " ")
  for (t = 1; t <= 2; ++t) {
    for (tokens_i = 0; tokens_i < 2; ++tokens_i) {
      tokens = tokens_i == 0 ? 32768 : 1048576
      base = "BM_positions_scan_windows<std::" types[t] "_t>/" tokens "/0"
      for (w = 1; w <= 4; ++w) {
        n = "BM_positions_scan_windows<std::" types[t] "_t>/" tokens "/" w
        if (n in time) printf "  positions scan %s %8d tokens %-16s ratio to no window %5.2f%s\n", types[t], tokens, label[n], time[n] / time[base], (w == 1 || w == 4) ? " (target <= 1.3)" : ""
      }
    }
  }
}
AWK
# Python: Meter.on_microbatch against the reference trainer's per-micro-batch torch ops, in one run.
py="${FLOPMETER_PYTHON:-}"
if [ -z "$py" ]; then
  venv="$build/bench-venv"
  # Debian's own interpreter, whose site-packages hold python3-torch (not a pyenv or other python3 on PATH).
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  # Rebuilds reuse the package's own build tree (pyproject.toml: build/python/{wheel_tag}).
  (cd "$root" && "$venv/bin/python" -m pip install -q --disable-pip-version-check .)
  py="$venv/bin/python"
fi
if "$py" -c 'import torch, flopmeter' 2>/dev/null; then
  "$py" "$root/bench/python_on_microbatch.py" --json "$out/python_on_microbatch.json"
  # The same after an untimed 32 MiB write before every call: the caches a hook meets in a training loop.
  "$py" "$root/bench/python_on_microbatch.py" --cold --calls 200 --json "$out/python_on_microbatch_cold.json"
  # flopmeter.watch's forward pre-hook against a bare one (goal: <= 5 us over the C fast path).
  "$py" "$root/bench/watch_hook.py" --json "$out/watch_hook.json"
else
  echo "python on_microbatch: skipped ($py cannot import torch and flopmeter; Debian: apt-get install python3-torch)"
fi
