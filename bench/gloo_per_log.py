"""Time per log of flopmeter's per-log collectives in real Gloo jobs of 2 to 32 processes: three ways, one run.

- table: the per-rank table at every log (``topk_interval_logs = 1``: a SUM all-reduce of world_size rows of 39
  doubles through the Python adapter), what flopmeter did before the fixed-size reduction;
- ring: the fixed-size reduction (``topk_interval_logs = 1000``: a SUM of 22 and a MAX of 49 doubles per log,
  whatever the world) by c10d's Gloo all-reduce, a ring of 2 (world - 1) rounds (``small_allreduce="backend"``);
- log_depth: the same vector by recursive halving and doubling over send/recv on the Meter's daemon thread,
  log2(world) + min(log2(world), 7) rounds, + 2 when world is not a power of two
  (``small_allreduce="log_depth"``).
Each job runs the three, one after the other, on groups of their own, in the same processes: every rank makes
``LOGS`` back-to-back logs with one micro-batch each, so each on_log waits for the previous log's collectives,
and the time per log is the collectives' latency plus flopmeter's own work. Reported: the median over ranks of
the mean time per log, its growth per doubling of the world, and the bytes each rank hands to the all-reduces
per log (counted in the Python adapter). On a 2-core machine 32 processes share the cores, so the figures
include scheduling; the growth per doubling is the point.

usage: python3 bench/gloo_per_log.py [SIZES...]     (default 2 4 8 16 32; needs torch and flopmeter)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LOGS = 40
WARMUP = 5


def rank_main(rank: int, world: int, init: str, out: str) -> None:
    import torch.distributed as dist

    import flopmeter
    from flopmeter import _distributed

    start_allreduce = _distributed.TorchCollective._start_allreduce
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    result = {}
    for name, interval, algorithm in (("table", 1, "backend"), ("ring", 1000, "backend"),
                                      ("log_depth", 1000, "log_depth")):
        # The doubles each log hands to the all-reduces (this rank's input; Gloo's ring moves about twice that),
        # counted in the Python adapter's start (patched on the class, before the Meter binds it).
        doubles = [0]

        def counting(self, user, values, count, op="sum", doubles=doubles):
            doubles[0] += count
            return start_allreduce(self, user, values, count, op)

        _distributed.TorchCollective._start_allreduce = counting
        meter = flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1000.0}, sinks={"console": False},
                                logging={"topk_interval_logs": interval, "collective_timeout_ms": 60000},
                                small_allreduce=algorithm)
        dist.barrier()
        for step in range(1, WARMUP + 1):
            meter.on_microbatch(cu_seqlens=[0, 100, 228], samples=2)
            meter.on_log(step)
        dist.barrier()
        start = time.perf_counter()
        for step in range(WARMUP + 1, WARMUP + LOGS + 1):
            meter.on_microbatch(cu_seqlens=[0, 100, 228], samples=2)
            meter.on_log(step)
        result[name] = (time.perf_counter() - start) / LOGS
        result[name + "_bytes"] = doubles[0] * 8 / (WARMUP + LOGS)
        meter.flush()
        assert meter.health["failed_collectives"] == 0, meter.health
    with open(out, "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def run(world: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init")
        outs = [os.path.join(tmp, f"rank{r}.json") for r in range(world)]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(world), init, outs[r]], env=env)
                 for r in range(world)]
        for p in procs:
            if p.wait(timeout=1800) != 0:
                raise SystemExit(f"a rank of the {world}-process job failed")
        per_rank = [json.load(open(o)) for o in outs]
    return {k: statistics.median(r[k] for r in per_rank) for k in per_rank[0]}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
        return
    sizes = [int(a) for a in sys.argv[1:]] or [2, 4, 8, 16, 32]
    from flopmeter import _log_depth

    modes = ("table", "ring", "log_depth")
    print(f"flopmeter per-log collectives over Gloo (bench/gloo_per_log.py): {LOGS} logs per mode, median over ranks")
    print(f"{'ranks':>6} {'rounds ring/log_depth':>21} " + " ".join(f"{m + ' ms/log':>17} {'x/doubling':>10} {'B/log':>6}"
                                                               for m in modes))
    previous = None
    for world in sizes:
        t = run(world)
        cells = []
        for m in modes:
            growth = "" if previous is None else f"{t[m] / previous[m]:.2f}"
            cells.append(f"{t[m] * 1e3:>17.2f} {growth:>10} {t[m + '_bytes']:>6.0f}")
        rounds = f"{2 * (world - 1)}/{_log_depth.allreduce_rounds(world, 71)}"
        print(f"{world:>6} {rounds:>21} " + " ".join(cells), flush=True)
        previous = t

if __name__ == "__main__":
    main()
