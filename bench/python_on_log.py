"""Python Meter.on_log per call in one process: the collective is local, so what is timed is the C ABI call, the
derivation, and the record's way into Python (its values, or before 0.3 its JSON text, made into a dict).

Each log follows one micro-batch (qwen3_vl_2b, 11 documents, untimed). A round times `--logs` logs; the report
is the median over rounds of the calling thread's CPU time per on_log (wall time beside it).

Usage: python bench/python_on_log.py [--model PATH|NAME] [--rounds 15] [--logs 500] [--json FILE]
To compare two builds, run it once with each package (PYTHONPATH and FLOPMETER_LIBRARY) on the same machine.
Speed is reported here, never asserted in tests: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import flopmeter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3_vl_2b")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--logs", type=int, default=500)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    cu_seqlens = [0, 1000, 3000, 3100, 5000, 9000, 12000, 16000, 20000, 24000, 28000, 32768]
    cpu, wall = [], []
    records = 0
    with flopmeter.Meter(model=args.model, peak={"tflops_per_gpu": 1e5}, sinks={"console": False}) as meter:
        step = 0
        for _ in range(args.rounds):
            cpu_ns = wall_ns = 0
            for _ in range(args.logs):
                meter.on_microbatch(cu_seqlens=cu_seqlens, samples=11)
                step += 1
                c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
                record = meter.on_log(step, learning_rate=1e-4, grad_norm=1.0)
                cpu_ns += time.thread_time_ns() - c0
                wall_ns += time.perf_counter_ns() - w0
                records += record is not None
            cpu.append(cpu_ns / args.logs / 1e3)
            wall.append(wall_ns / args.logs / 1e3)
    result = {"on_log_cpu_us": statistics.median(cpu), "on_log_wall_us": statistics.median(wall),
              "records": records, "keys": len(record or {})}
    print(f"on_log: {result['on_log_cpu_us']:.2f} us CPU, {result['on_log_wall_us']:.2f} us wall per call "
          f"(median of {args.rounds} rounds of {args.logs}; {records} records of {result['keys']} keys)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
