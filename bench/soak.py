"""Soak: flopmeter under a long run, flat in memory, file descriptors, threads and per-call cost.

4 Gloo ranks (torch.distributed, one process each) drive flopmeter.Meter with the JSONL and TensorBoard sinks
on: MICROBATCHES_PER_LOG micro-batches per log, an invalid micro-batch every 997 (refused, counted), and one
rank skipping one on_log in every 10,000. Every REPORT_EVERY logs each rank records its resident memory (RSS),
open file descriptors, threads, and the median and 99th percentile of the CPU time of on_microbatch and on_log
over that stretch. Rank 0 prints the table and compares the first 10% of the run with the last 10%:
  goals: RSS within 1 MiB, per-call cost (median) within 10%, no growth in file descriptors or threads.
CPU time of the calling thread, not wall time: the comparison of the process with itself then holds on a
machine that other work shares.

  long form (run by hand):          python bench/soak.py --logs 100000 --microbatches-per-log 20
  short form (CI, tests/python/test_soak.py):  python bench/soak.py --logs 6000 --report-every 600 --check
Exit status with --check: 1 when a goal is missed.
CI checks the per-call cost as instructions instead (bench/soak_cost.py under valgrind's callgrind, the long
form's 100,000 logs in about 2.5 minutes): CPU time on a shared 2-core machine moved by 50% between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def status_field(name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise KeyError(name)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rank_main(args) -> None:
    import torch
    import torch.distributed as dist

    import flopmeter

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"file://{args.init}", rank=rank, world_size=world)
    out = Path(args.out)
    meter = flopmeter.Meter(model="qwen3_vl_2b", peak={"gpu": "H100 SXM"},
                            logging={"collective_timeout_ms": 60000},
                            sinks={"console": False, "jsonl": str(out / f"metrics_{rank}.jsonl"),
                                   "tensorboard": str(out / f"tb{rank}")} if rank == 0 else {"console": False})
    cu = torch.tensor([0, 1000, 1800, 4096], dtype=torch.int64)
    grids = torch.tensor([[1, 16, 16], [2, 8, 12]], dtype=torch.int64)
    bad = torch.tensor([0, 100, 50], dtype=torch.int64)  # decreasing: refused with ValueError, counted
    thread_ns = time.thread_time_ns
    reports = []
    mb_costs, log_costs = [], []
    n = 0
    for step in range(1, args.logs + 1):
        for _ in range(args.microbatches_per_log):
            n += 1
            if n % 997 == 0:
                try:
                    meter.on_microbatch(cu_seqlens=bad)
                except ValueError:
                    pass
                continue
            t0 = thread_ns()
            meter.on_microbatch(cu_seqlens=cu, grid_thw=grids, samples=2, loss_sum=3.0, label_tokens=100)
            mb_costs.append(thread_ns() - t0)
        if rank == 1 and step % 10000 == 5000:
            continue  # one skipped on_log in every 10,000
        t0 = thread_ns()
        meter.on_log(step)
        log_costs.append(thread_ns() - t0)
        if step % args.report_every == 0:
            reports.append({
                "logs": step, "rss_kib": status_field("VmRSS"), "fds": len(os.listdir("/proc/self/fd")),
                "threads": status_field("Threads"),
                "mb_p50_us": statistics.median(mb_costs) / 1e3, "mb_p99_us": percentile(mb_costs, 0.99) / 1e3,
                "log_p50_us": statistics.median(log_costs) / 1e3, "log_p99_us": percentile(log_costs, 0.99) / 1e3,
            })
            mb_costs, log_costs = [], []
    meter.flush()
    health = meter.health
    meter.close()
    (out / f"rank{rank}.json").write_text(json.dumps({"reports": reports, "health": health}))
    dist.barrier()
    dist.destroy_process_group()


def compare(reports):
    """The first 10% of the run against the last 10% (at least one report each)."""
    k = max(1, len(reports) // 10)
    first, last = reports[:k], reports[-k:]
    # Memory and descriptors: the state at the end of the first part against the end of the run.
    rss_growth_kib = last[-1]["rss_kib"] - first[-1]["rss_kib"]
    cost = {key: statistics.median(r[key] for r in last) / statistics.median(r[key] for r in first)
            for key in ("mb_p50_us", "log_p50_us", "mb_p99_us", "log_p99_us")}
    return {
        "rss_growth_kib": rss_growth_kib, "fds": (first[-1]["fds"], last[-1]["fds"]),
        "threads": (first[-1]["threads"], last[-1]["threads"]), "cost_ratio_last_over_first": cost,
        "goals_met": rss_growth_kib <= 1024 and last[-1]["fds"] <= first[-1]["fds"] and
        last[-1]["threads"] <= first[-1]["threads"] and cost["mb_p50_us"] <= 1.10 and cost["log_p50_us"] <= 1.10,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logs", type=int, default=100000)
    parser.add_argument("--microbatches-per-log", type=int, default=20)
    parser.add_argument("--report-every", type=int, default=10000)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--init", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_worker:
        rank_main(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, __file__, "--rank-worker", "--init", f"{tmp}/init", "--out", tmp, "--logs",
                str(args.logs), "--microbatches-per-log", str(args.microbatches_per_log), "--report-every",
                str(args.report_every)]
        procs = [subprocess.Popen(argv, env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.ranks),
                                                 OMP_NUM_THREADS="1")) for r in range(args.ranks)]
        codes = [p.wait() for p in procs]
        if any(codes):
            print(f"soak: a rank failed: {codes}", file=sys.stderr)
            return 1
        ranks = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(args.ranks)]
        lines = sum(1 for _ in open(Path(tmp) / "metrics_0.jsonl"))
    print(f"soak: {args.ranks} Gloo ranks, {args.logs} logs x {args.microbatches_per_log} micro-batches, "
          f"JSONL + TensorBoard on rank 0 ({lines} records written)")
    print(f"{'logs':>8} {'RSS MiB':>9} {'fds':>4} {'thr':>4} {'mb p50 us':>10} {'mb p99 us':>10} "
          f"{'log p50 us':>11} {'log p99 us':>11}")
    for r in ranks[0]["reports"]:
        print(f"{r['logs']:>8} {r['rss_kib'] / 1024:>9.2f} {r['fds']:>4} {r['threads']:>4} {r['mb_p50_us']:>10.2f} "
              f"{r['mb_p99_us']:>10.2f} {r['log_p50_us']:>11.1f} {r['log_p99_us']:>11.1f}")
    verdicts = [compare(rank["reports"]) for rank in ranks]
    for r, (rank, v) in enumerate(zip(ranks, verdicts)):
        c = v["cost_ratio_last_over_first"]
        print(f"rank {r}: RSS {v['rss_growth_kib']:+d} KiB, fds {v['fds'][0]}->{v['fds'][1]}, threads "
              f"{v['threads'][0]}->{v['threads'][1]}, cost last/first: on_microbatch p50 {c['mb_p50_us']:.3f} "
              f"p99 {c['mb_p99_us']:.3f}, on_log p50 {c['log_p50_us']:.3f} p99 {c['log_p99_us']:.3f}; health "
              f"{rank['health']} -> {'ok' if v['goals_met'] else 'GOAL MISSED'}")
    print(json.dumps({"soak": verdicts}))
    return 0 if all(v["goals_met"] for v in verdicts) or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
