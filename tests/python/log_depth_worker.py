"""One rank of test_log_depth.py: flopmeter's log-depth all-reduce and all-gather (flopmeter/_log_depth.py) over
Gloo groups of every size up to the job's, against torch.distributed's own SUM and MAX all-reduce and
all-gather.

usage: log_depth_worker.py SIZES RANK WORLD INIT_FILE OUT_FILE   (SIZES: comma-separated group sizes <= WORLD)
"""

from __future__ import annotations

import json
import sys
import time
import weakref

import torch
import torch.distributed as dist

from flopmeter import _log_depth


def contribution(rank: int, size: int, round_: int) -> torch.Tensor:
    # SUM part (3): integers, so any order of addition gives the exact sum; MAX part (3): r, -r and a value
    # whose maximum sits at a middle rank.
    r, k = float(rank), float(round_)
    return torch.tensor([r + k, 3 * r + 1, 1.0, r, -r, 100 - (r - size // 2) ** 2], dtype=torch.float64)


def row(rank: int, round_: int) -> torch.Tensor:
    # Fractions with no short binary form, and -0 at rank 0: a gather copies bits, so they must arrive as sent.
    r = float(rank)
    return torch.tensor([r / 7, -r, round_ + r / 3], dtype=torch.float64)


def main() -> None:
    sizes = [int(s) for s in sys.argv[1].split(",")]
    rank, world, init, out = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    results = {}
    for size in sizes:
        group = dist.new_group(ranks=list(range(size)), backend="gloo")  # every rank makes every group
        if rank >= size:
            continue
        worker = _log_depth.LogDepthWorker(group, rank, size)
        runs = []
        for round_ in range(2):
            values = contribution(rank, size, round_)
            work = worker.submit(values, 3)  # SUM of the first 3, MAX of the rest, in one pass
            gather = worker.submit_allgather(row(rank, round_))
            single = worker.submit(torch.tensor([rank + 1.0 + round_], dtype=torch.float64), 1)
            sums, maxima = values[:3].clone(), values[3:].clone()
            dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=group)
            dist.all_reduce(maxima, op=dist.ReduceOp.MAX, group=group)
            rows = [torch.empty(3, dtype=torch.float64) for _ in range(size)]
            dist.all_gather(rows, row(rank, round_), group=group)
            work.wait()
            gather.wait()
            single.wait()
            runs.append({"log_depth": work.values.tolist(), "plain": sums.tolist() + maxima.tolist(),
                         "single": single.values.tolist(),
                         "gathered": gather.values.numpy().tobytes().hex(),
                         "plain_gathered": torch.cat(rows).numpy().tobytes().hex()})
        # An idle worker holds no job: the tensors of a finished job die with the caller's last reference, not
        # when the next job (or the stop) wakes the thread. A thread that freed a tensor on waking at exit
        # aborted the process (_log_depth.LogDepthWorker.stop says why).
        released = weakref.ref(gather.values), weakref.ref(work.values), weakref.ref(single.values)
        del work, gather, single
        deadline = time.monotonic() + 5.0
        while any(r() is not None for r in released) and time.monotonic() < deadline:
            time.sleep(0.01)  # the worker drops its reference just after it signalled the job finished
        stopped = worker.stop()
        results[str(size)] = runs
        results[f"{size}_exit"] = {"idle_worker_held_a_job": any(r() is not None for r in released),
                                   "stop_returned": stopped, "thread_alive_after_stop": worker._thread.is_alive()}
    with open(out, "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
