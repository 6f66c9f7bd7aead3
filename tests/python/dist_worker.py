"""One rank of the multi-process tests (test_distributed.py): a torch.distributed Gloo job whose ranks report
through flopmeter.Meter. Writes what it saw (records, health) as JSON for the test to check.

usage: dist_worker.py SCENARIO RANK WORLD INIT_FILE OUT_FILE
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.distributed as dist

import flopmeter

# Replica r's micro-batches (the same on every tp rank of the replica: each passes the whole micro-batch).
# Replica 0 runs 2 micro-batches per interval, replica 1 runs 3: uneven data per replica.
REPLICA_BATCHES = {
    0: [dict(cu_seqlens=[0, 100, 300], grid_thw=[[1, 4, 4]], samples=2, loss_sum=40.0, label_tokens=20),
        dict(cu_seqlens=[0, 250], padding_tokens=6, samples=1, loss_sum=10.0, label_tokens=5)],
    1: [dict(cu_seqlens=[0, 50, 60, 64], grid_thw=[[2, 4, 8], [1, 2, 2]], samples=3, loss_sum=9.0,
             label_tokens=30),
        dict(cu_seqlens=[0, 512], samples=1, loss_sum=3.0, label_tokens=10),
        dict(cu_seqlens=[0, 1, 2, 3], padding_tokens=61, samples=3, loss_sum=1.0, label_tokens=3)],
}
LOGS = 4


def main() -> None:
    scenario, rank, world, init_file, out_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    records = {}
    result = {"rank": rank}
    if scenario in ("dp2_tp2", "dp2_tp2_reduced", "dp2_tp2_reduced_backend", "skip_one_log",
                    "skip_one_log_log_depth"):
        if scenario.startswith("dp2_tp2"):
            # dp2_tp2_reduced: the table every third log, a SUM and a MAX of fixed size at the others (4 ranks:
            # by the log-depth collectives, small_allreduce="automatic"); ..._backend: the same by Gloo's rings.
            interval = 3 if scenario.startswith("dp2_tp2_reduced") else 0
            algorithm = "backend" if scenario.endswith("_backend") else "automatic"
            meter = flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1000.0}, parallel={"tp": 2},
                                    logging={"emit": "all", "topk": 4, "topk_interval_logs": interval},
                                    sinks={"console": False}, small_allreduce=algorithm)
            result["algorithm"] = meter._collective.algorithm
            replica = rank // 2  # order tp-cp-dp-pp: ranks 0, 1 form replica 0, ranks 2, 3 replica 1
            batches, logs, skipped = REPLICA_BATCHES[replica], LOGS, None
        elif scenario == "skip_one_log":
            meter = flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1000.0},
                                    logging={"emit": "all", "collective_timeout_ms": 20000}, sinks={"console": False})
            result["algorithm"] = meter._collective.algorithm
        else:  # skip_one_log_log_depth: ordinary logs only (no table), each one log-depth all-reduce, chosen by
            # the configuration's [logging] small_allreduce (no keyword)
            meter = flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1000.0}, sinks={"console": False},
                                    logging={"emit": "all", "collective_timeout_ms": 20000, "topk_interval_logs": 1000,
                                             "small_allreduce": "log_depth"})
            result["algorithm"] = meter._collective.algorithm
        if scenario.startswith("skip_one_log"):
            batches, logs = [dict(cu_seqlens=[0, 10 * (rank + 1)], samples=1)], 8
            skipped = 4 if rank == 1 else None  # rank 1 skips the on_log of step 4
        for step in range(1, logs + 1):
            for batch in batches:
                assert meter.on_microbatch(**batch)
            time.sleep(0.02)
            if step == skipped:
                continue
            record = meter.on_log(step)
            if record is not None:
                records[record["step"]] = record
        record = meter.flush()
        if record is not None:
            records[record["step"]] = record
        result["health"] = meter.health
    elif scenario == "slow_peer":
        # Rank 1 joins the collective of step 1 late: rank 0's on_log(2) waits for it. What that wait costs
        # rank 0's thread in CPU time is the point (test_distributed.py: no polling while waiting).
        meter = flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1000.0},
                                logging={"collective_timeout_ms": 20000}, sinks={"console": False})
        meter.on_microbatch(cu_seqlens=[0, 10], samples=1)
        if rank == 1:
            time.sleep(1.5)
        meter.on_log(1)
        meter.on_microbatch(cu_seqlens=[0, 10], samples=1)
        cpu, wall = time.thread_time(), time.monotonic()
        record = meter.on_log(2)
        result["wait_cpu_s"], result["wait_wall_s"] = time.thread_time() - cpu, time.monotonic() - wall
        if record is not None:
            records[record["step"]] = record
        meter.flush()
        result["health"] = meter.health
    elif scenario == "different_training":
        # Rank 1 trains everything, the others freeze the ViT: their rows mean different FLOPs per token.
        frozen = [] if rank == 1 else ["vision"]
        meter = flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1000.0}, frozen=frozen,
                                logging={"emit": "all"}, sinks={"console": False})
        for step in range(1, 4):
            meter.on_microbatch(cu_seqlens=[0, 10], grid_thw=[[1, 4, 4]], samples=1)
            time.sleep(0.01)
            record = meter.on_log(step)
            if record is not None:
                records[record["step"]] = record
        record = meter.flush()
        if record is not None:
            records[record["step"]] = record
        result["health"] = meter.health
    elif scenario == "small_group":
        # Every rank makes every group, in the same order (torch.distributed's rule for new_group).
        first_two = dist.new_group(ranks=[0, 1], backend="gloo")
        last = dist.new_group(ranks=[2], backend="gloo")
        whole = dist.new_group(backend="gloo")
        try:
            flopmeter.Meter(model="tiny_vlm", process_group=first_two if rank < 2 else last)
            result["error"] = None
        except ValueError as e:
            result["error"] = str(e)
        with flopmeter.Meter(model="tiny_vlm", process_group=whole, sinks={"console": False}) as meter:
            result["whole_world"] = [meter.rank, meter.world_size]
    result["records"] = records
    with open(out_file, "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
