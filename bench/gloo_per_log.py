"""Time per log of flopmeter's per-log collectives in real Gloo jobs of 2 to 32 processes, before and after.

Before: the per-rank table at every log (``topk_interval_logs = 1``: a SUM all-reduce of world_size rows of 39
doubles through the Python adapter). After: the fixed-size reduction (``topk_interval_logs = 1000``: a SUM of
18 and a MAX of 44 doubles per log, whatever the world). Each job runs both, one after the other, on groups of
their own, in the same processes: every rank makes ``LOGS`` back-to-back logs with one micro-batch each, so
each on_log waits for the previous log's collectives, and the time per log is the collectives' latency plus
flopmeter's own work. Reported: the median over ranks of the mean time per log, and its growth per doubling
of the world. On a 2-core machine 32 processes share the cores, so the figures include scheduling; the
growth per doubling is the point.

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

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    result = {}
    for name, interval in (("before", 1), ("after", 1000)):
        meter = flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1000.0}, sinks={"console": False},
                                logging={"topk_interval_logs": interval, "collective_timeout_ms": 60000})
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
    return {k: statistics.median(r[k] for r in per_rank) for k in ("before", "after")}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
        return
    sizes = [int(a) for a in sys.argv[1:]] or [2, 4, 8, 16, 32]
    print(f"flopmeter per-log collectives over Gloo (bench/gloo_per_log.py): {LOGS} logs per mode, median over ranks")
    print(f"{'ranks':>6} {'before ms/log':>14} {'x/doubling':>11} {'after ms/log':>13} {'x/doubling':>11}")
    previous = None
    for world in sizes:
        t = run(world)
        growth = ("", "") if previous is None else (f"{t['before'] / previous['before']:.2f}",
                                                    f"{t['after'] / previous['after']:.2f}")
        print(f"{world:>6} {t['before'] * 1e3:>14.2f} {growth[0]:>11} {t['after'] * 1e3:>13.2f} {growth[1]:>11}",
              flush=True)
        previous = t


if __name__ == "__main__":
    main()
