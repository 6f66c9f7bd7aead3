#!/usr/bin/env bash
# scripts/plot_metrics.sh METRICS.jsonl OUT.png — plots perf/tokens_per_second, perf/mfu, perf/hfu (hardware FLOPs:
# with activation recomputation, the recomputed forward too) and perf/mfu_megatron (what Megatron's per-token constant
# would report for the same intervals) over steps from flopmeter's JSONL with gnuplot (Debian: gnuplot-nox). An MFU
# or HFU is drawn only when the file has it.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 METRICS.jsonl OUT.png" >&2
  exit 2
fi
jsonl=$1
png=$2
data=$(mktemp)
trap 'rm -f "$data"' EXIT
# One "step tok/s mfu mfu_megatron hfu" line per record; a missing field becomes NaN (gnuplot skips it).
awk '
  function field(name,   pattern, rest) {
    pattern = "\"" name "\":"
    if (index($0, pattern) == 0) return "NaN"
    rest = substr($0, index($0, pattern) + length(pattern))
    sub(/[,}].*/, "", rest)
    return rest == "null" ? "NaN" : rest
  }
  { print field("step"), field("perf/tokens_per_second"), field("perf/mfu"), field("perf/mfu_megatron"), field("perf/hfu") }
' "$jsonl" > "$data"
if [ ! -s "$data" ]; then
  echo "plot_metrics: $jsonl has no records" >&2
  exit 1
fi
gnuplot <<GNUPLOT
set terminal pngcairo size 1000,560 font "sans,11" noenhanced
set output "$png"
set title "flopmeter: throughput over training ($(basename "$jsonl"))"
set xlabel "optimizer step"
set ylabel "tokens / s (whole job)"
set y2label "MFU, HFU (%)"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set grid
set key bottom right
plot "$data" using 1:2 with linespoints lw 2 pt 7 title "perf/tokens_per_second", \
     "$data" using 1:3 axes x1y2 with linespoints lw 2 pt 5 title "perf/mfu (exact)", \
     "$data" using 1:5 axes x1y2 with lines lw 2 dt 3 title "perf/hfu (hardware FLOPs, recomputation included)", \
     "$data" using 1:4 axes x1y2 with linespoints lw 2 pt 9 dt 2 title "perf/mfu_megatron (per-token constant)"
GNUPLOT
echo "$png"
