#!/usr/bin/env python3
"""The hot paths' instructions per call, counted by valgrind's callgrind, and the ratios issue 30 sets:
on_microbatch with cu_seqlens for a model with windows against the full-attention model (target <= 1.15), and
the positions scan with one window against the scan without (target <= 1.3).

Each case is bench/hot_path_instructions.cpp (built as bench/hot_path_instructions) run once under callgrind:
it zeroes the counters after a warm-up call and dumps them after ITERATIONS calls, so the dump's total divided
by ITERATIONS is one call's instructions (the loop around it included, a few instructions).

    python3 bench/hot_path_instructions.py [--driver build/bench/hot_path_instructions]
                                           [--before OTHER_BUILD/bench/hot_path_instructions] [--json]

With --before, the same cases run on a second build (e.g. of main) and each row shows before, after and
after / before, and the models with windows are also compared with the full-attention model of the build before
(the issue's "today's full-attention cost"). Prints a table; --json prints one JSON object instead. Exits 2 when valgrind is missing
(Debian's valgrind).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# (case, iterations): the positions scan reads 32768 entries per call, the others a few dozen numbers.
CASES = [
    ("on_microbatch:full:cu_seqlens", 2000),
    ("on_microbatch:sliding_full:cu_seqlens", 2000),
    ("on_microbatch:gemma:cu_seqlens", 2000),
    ("on_microbatch:sliding:cu_seqlens", 2000),
    ("on_microbatch:two_windows:cu_seqlens", 2000),
    ("on_microbatch:vlm:cu_seqlens", 2000),
    ("on_microbatch:dsa:cu_seqlens", 2000),
    ("on_microbatch:llama4:cu_seqlens", 2000),
    ("on_microbatch:full:positions", 50),
    ("on_microbatch:dsa:positions", 50),
    ("on_microbatch:llama4:positions", 50),
    ("on_microbatch:mamba:cu_seqlens", 2000),
    ("on_microbatch:full:lengths", 2000),
    ("on_microbatch:two_windows:lengths", 2000),
    ("count:full", 2000),
    ("count:two_windows", 2000),
    ("scan:int64:full", 50),
    ("scan:int64:sliding", 50),
    ("scan:int64:chunked", 50),
    ("scan:int64:sliding_chunked", 50),
    ("scan:int32:full", 50),
    ("scan:int32:sliding", 50),
    ("scan:int32:chunked", 50),
    ("scan:int32:sliding_chunked", 50),
]

# (numerator, denominator, target): the ratios printed under the table.
RATIOS = [
    ("on_microbatch:sliding_full:cu_seqlens", "on_microbatch:full:cu_seqlens", 1.15),
    ("on_microbatch:gemma:cu_seqlens", "on_microbatch:full:cu_seqlens", 1.15),
    ("on_microbatch:sliding:cu_seqlens", "on_microbatch:full:cu_seqlens", 1.15),
    ("on_microbatch:two_windows:cu_seqlens", "on_microbatch:full:cu_seqlens", 1.15),
    ("on_microbatch:dsa:cu_seqlens", "on_microbatch:full:cu_seqlens", 1.15),
    ("on_microbatch:llama4:cu_seqlens", "on_microbatch:full:cu_seqlens", 1.15),
    ("on_microbatch:dsa:positions", "on_microbatch:full:positions", 1.3),
    ("on_microbatch:llama4:positions", "on_microbatch:full:positions", 1.3),
    ("on_microbatch:mamba:cu_seqlens", "on_microbatch:full:cu_seqlens", 1.15),
    ("on_microbatch:two_windows:lengths", "on_microbatch:full:lengths", 1.15),
    ("count:two_windows", "count:full", None),
    ("scan:int64:sliding", "scan:int64:full", 1.3),
    ("scan:int64:chunked", "scan:int64:full", 1.3),
    ("scan:int64:sliding_chunked", "scan:int64:full", None),
    ("scan:int32:sliding", "scan:int32:full", 1.3),
    ("scan:int32:chunked", "scan:int32:full", 1.3),
    ("scan:int32:sliding_chunked", "scan:int32:full", None),
]


def instructions_per_call(driver: Path, case: str, iterations: int, scratch: Path) -> float:
    """One case under callgrind: the dumped window's instructions over its calls."""
    out = scratch / "callgrind.out"
    for old in scratch.glob("callgrind.out*"):
        old.unlink()
    subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=yes", f"--callgrind-out-file={out}",
                    str(driver), case, str(iterations)], check=True, capture_output=True, text=True)
    # CALLGRIND_DUMP_STATS_AT writes callgrind.out.1 (the window); the final dump holds what came after.
    for dump in sorted(scratch.glob("callgrind.out.*")):
        text = dump.read_text()
        if f"desc: Trigger: Client Request: {case}" not in text:
            continue
        match = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
        if match:
            return int(match.group(1)) / iterations
    raise RuntimeError(f"{case}: no callgrind dump with the measured window")


def measure(driver: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="hot_path_instructions.") as tmp:
        return {case: instructions_per_call(driver, case, n, Path(tmp)) for case, n in CASES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", type=Path, default=REPO / "build" / "bench" / "hot_path_instructions")
    parser.add_argument("--before", type=Path, help="the same driver built from another tree (e.g. main)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("hot_path_instructions: valgrind is not installed (Debian: valgrind)", file=sys.stderr)
        return 2
    after = measure(args.driver)
    before = measure(args.before) if args.before else None
    if args.json:
        print(json.dumps({"after": after, "before": before}))
        return 0
    header = f"{'case':40s} {'instructions/call':>18s}"
    if before:
        header = f"{'case':40s} {'before':>12s} {'after':>12s} {'after/before':>13s}"
    print(header)
    for case, _ in CASES:
        if before:
            print(f"{case:40s} {before[case]:12.1f} {after[case]:12.1f} {after[case] / before[case]:13.3f}")
        else:
            print(f"{case:40s} {after[case]:18.1f}")
    print("\nratios in one build (target):")
    for numerator, denominator, target in RATIOS:
        goal = f"(target <= {target})" if target else ""
        line = f"  {numerator} / {denominator}: "
        if before:
            line += f"before {before[numerator] / before[denominator]:.3f}, "
        line += f"after {after[numerator] / after[denominator]:.3f} {goal}"
        print(line)
    if before:
        # Issue 30 states the on_microbatch target against today's full-attention cost: the build before.
        print("\nwith windows now against full attention in the build before (target <= 1.15):")
        for numerator, denominator, target in RATIOS:
            if numerator.startswith("on_microbatch") and target:
                print(f"  {numerator} now / {denominator} before: {after[numerator] / before[denominator]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
