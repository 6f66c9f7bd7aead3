"""Python Meter.on_microbatch per call, against the reference trainer's own per-micro-batch code, side by side.

The batch is bench/bench_on_microbatch.cpp's: one 32,768-token row of 11 documents and 8 images (qwen3_vl_2b),
as CPU tensors the way a trainer holds them:
  - flopmeter, cu_seqlens:   meter.on_microbatch(cu_seqlens=<int64 [12]>, grid_thw=<int64 [8, 3]>, samples=11)
  - flopmeter, position_ids: meter.on_microbatch(position_ids=<int64 [32768]>, grid_thw=..., samples=11)
  - the reference: torch ops on the same tensors (/work/shared/seed METRICS-seed: numel(positions),
    sum(positions + 1) (the causal pairs), sum(t*h*w) and sum((t*h*w)^2) over grid_thw, a dot product with the
    four seed coefficients, accumulated into a float64 tensor).

flopmeter's variants take its C fast path (flopmeter/_fastpath.c) when the package has it; the same calls
through the general path (what a package built without Python's headers takes) are timed beside them, for
information.

Each round times every variant over the same number of calls, in a rotating order, so that a load spike on a
shared machine hits all of them; the report is the median over rounds of the calling thread's CPU time per
call (wall time beside it) and the ratios reference / flopmeter (goals: >= 20x for cu_seqlens, >= 5x for position_ids). `--breakdown` also times the
stages of the Python path one by one (flopmeter's private helpers: it says where a call's time goes).

Usage: python bench/python_on_microbatch.py [--rounds 15] [--calls 2000] [--breakdown] [--cold] [--json FILE]
(--cold: every call after a 32 MiB write, untimed, as in a training loop where the forward and backward passes
have evicted the caches; both sides get the same treatment.)
Speed goals are reported here, never asserted in tests: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
import timeit
from typing import Callable, Dict, List

import torch

import flopmeter
from flopmeter import _batch  # which fast path the installed package has (NATIVE_FAST_PATH: the C one)

LENGTHS = [8192, 6000, 4096, 3500, 3000, 2600, 2000, 1500, 1024, 600, 256]
GRIDS = [[1, 32, 32], [1, 16, 24], [2, 16, 16], [1, 8, 8], [1, 24, 32], [4, 12, 12], [1, 10, 14], [1, 2, 2]]
GOALS = {"cu_seqlens": 20.0, "position_ids": 5.0}


def make_batch() -> Dict[str, torch.Tensor]:
    assert sum(LENGTHS) == 32768 and len(LENGTHS) == 11 and len(GRIDS) == 8
    return {
        "cu_seqlens": torch.tensor([0] + list(itertools.accumulate(LENGTHS)), dtype=torch.int64),
        "position_ids": torch.cat([torch.arange(n, dtype=torch.int64) for n in LENGTHS]),
        "image_grid_thw": torch.tensor(GRIDS, dtype=torch.int64),
    }


class Reference:
    """The reference trainer's per-micro-batch FLOP count: torch ops on the batch tensors, into a tensor."""

    def __init__(self, coefficients: Dict[str, float]) -> None:
        self.coefficients = torch.tensor([float(coefficients[k]) for k in
                                          ("dense_per_token", "text_attn_pair", "vision_per_patch",
                                           "vision_attn_pair")], dtype=torch.float64)
        self.flops = torch.zeros((), dtype=torch.float64)

    def on_microbatch(self, positions: torch.Tensor, grid_thw: torch.Tensor) -> None:
        patches = grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]
        counts = torch.stack((torch.tensor(positions.numel()), (positions + 1).sum(), patches.sum(),
                              (patches * patches).sum())).to(torch.float64)
        self.flops += torch.dot(counts, self.coefficients)


def per_call_us(fn: Callable[[], None], calls: int) -> tuple:
    """(CPU time, wall time) per call in microseconds. CPU time is this thread's (time.thread_time_ns): on a
    shared machine a preempted round inflates the wall time, not the CPU time; every variant here is
    single-threaded host work (torch runs with one thread)."""
    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    for _ in range(calls):
        fn()
    cpu, wall = time.thread_time_ns() - cpu, time.perf_counter_ns() - wall
    return cpu / calls / 1e3, wall / calls / 1e3


def per_call_cold_us(fn: Callable[[], None], calls: int, scratch: torch.Tensor) -> tuple:
    """Like per_call_us, but each call runs after `scratch` (larger than the caches) was written, as a hook in
    a training loop runs after the forward and backward passes; only the call itself is timed."""
    cpu = wall = 0
    for _ in range(calls):
        scratch.add_(1)
        w, c = time.perf_counter_ns(), time.thread_time_ns()
        fn()
        cpu += time.thread_time_ns() - c
        wall += time.perf_counter_ns() - w
    return cpu / calls / 1e3, wall / calls / 1e3


def run(rounds: int, calls: int, cold: bool = False) -> Dict[str, List[tuple]]:
    batch = make_batch()
    cu, positions, grids = batch["cu_seqlens"], batch["position_ids"], batch["image_grid_thw"]
    positions32 = positions.to(torch.int32)
    meter = flopmeter.Meter(model="qwen3_vl_2b", sinks={"console": False})
    reference = Reference(meter.model.coefficients)
    variants = {
        "flopmeter cu_seqlens": lambda: meter.on_microbatch(cu_seqlens=cu, grid_thw=grids, samples=11),
        "flopmeter position_ids": lambda: meter.on_microbatch(position_ids=positions, grid_thw=grids,
                                                              samples=11),
        "reference (torch ops)": lambda: reference.on_microbatch(positions, grids),
        # Information, no goal: the same positions as int32 (half the bytes for the library's scan).
        "flopmeter position_ids i32": lambda: meter.on_microbatch(position_ids=positions32, grid_thw=grids,
                                                                  samples=11),
    }
    # Information, no goal: the general path, which a package built without Python's headers takes.
    general_variants = {"flopmeter cu_seqlens, general", "flopmeter position_ids, general"}
    if _batch.NATIVE_FAST_PATH:
        variants["flopmeter cu_seqlens, general"] = variants["flopmeter cu_seqlens"]
        variants["flopmeter position_ids, general"] = variants["flopmeter position_ids"]
    # The same FLOPs both ways in seed scope is the precondition for comparing their cost at all.
    seed_flops = meter.model.flops(cu_seqlens=cu, grid_thw=grids, scope="seed")
    reference.on_microbatch(positions, grids)
    if int(reference.flops.item()) != seed_flops:
        raise SystemExit(f"reference counts {reference.flops.item()} FLOPs, flopmeter's seed scope {seed_flops}")
    scratch = torch.zeros(8 << 20, dtype=torch.float32) if cold else None  # 32 MiB
    measure = (lambda fn: per_call_cold_us(fn, calls, scratch)) if cold else (lambda fn: per_call_us(fn, calls))
    native = _batch.NATIVE_FAST_PATH
    for fn in variants.values():  # warm-up
        per_call_us(fn, calls // 10 + 1)
    names = list(variants)
    times: Dict[str, List[tuple]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            _batch.NATIVE_FAST_PATH = native and name not in general_variants
            times[name].append(measure(variants[name]))
        _batch.NATIVE_FAST_PATH = native
        meter.on_log(r + 1)  # end the interval between rounds, outside the timing
    if meter.health["bad_microbatches"]:
        raise SystemExit("the benchmark batch was rejected")
    meter.close()
    return times


def breakdown(calls: int) -> List[tuple]:
    """Each stage of Meter.on_microbatch on its own (private helpers; the minimum over 5 repeats)."""
    from flopmeter import _native  # private: this is a profile, not an API use

    batch = make_batch()
    cu, positions, grids = batch["cu_seqlens"], batch["position_ids"], batch["image_grid_thw"]
    meter = flopmeter.Meter(model="qwen3_vl_2b", sinks={"console": False})
    call = _native.lib().flopmeter_on_microbatch
    mb, mb_ref, handle = meter._mb, meter._mb_ref, meter._handle
    host_cu = _batch.host_array("cu_seqlens", cu)
    host_positions = _batch.host_array("position_ids", positions, allow_int32=True)
    host_grids = _batch.host_array("image_grid_thw", grids, want_rows=True)
    env = dict(globals(), **locals())

    def cost(stmt: str, setup: str = "pass") -> float:
        timer = timeit.Timer(stmt, setup, timer=time.thread_time, globals=env)  # CPU time, as above
        return min(timer.repeat(number=calls, repeat=5)) / calls * 1e6

    stages = [
        ("whole call, cu_seqlens", "meter.on_microbatch(cu_seqlens=cu, grid_thw=grids, samples=11)"),
        ("whole call, position_ids", "meter.on_microbatch(position_ids=positions, grid_thw=grids, samples=11)"),
        ("  one_batch_format (which description)", "_batch.one_batch_format(None, cu, None)"),
        ("  is_device_tensor x4 (batch, grids, loss, labels)",
         "_batch.is_device_tensor(cu) or _batch.is_device_tensor(grids) or _batch.is_device_tensor(None) or "
         "_batch.is_device_tensor(None)"),
        ("    of which tensor.device.type, once", "cu.device.type"),
        ("  host_array(cu_seqlens)", "_batch.host_array('cu_seqlens', cu)"),
        ("  host_array(position_ids)", "_batch.host_array('position_ids', positions, allow_int32=True)"),
        ("  host_array(image_grid_thw)", "_batch.host_array('image_grid_thw', grids, want_rows=True)"),
        ("  fill_microbatch (12 ctypes field stores)", "_batch.fill_microbatch(mb, 'cu_seqlens', host_cu, host_grids, 0)"),
        ("  the Meter's lock", "with meter._lock: pass"),
        ("  C call, prefilled cu_seqlens micro-batch (ctypes + the C++ hook)", "call(handle, mb_ref)",
         "_batch.fill_microbatch(mb, 'cu_seqlens', host_cu, host_grids, 0); mb.samples = 11; mb.has_loss = 0"),
        ("  C call, prefilled position_ids micro-batch (the scan of 32,768 entries)", "call(handle, mb_ref)",
         "_batch.fill_microbatch(mb, 'position_ids', host_positions, host_grids, 0)"),
        ("  C call, empty micro-batch (ctypes call overhead + the hook's fixed cost)", "call(handle, mb_ref)",
         "_batch.fill_microbatch(mb, None, None, None, 0)"),
    ]
    if _batch.NATIVE_FAST_PATH:
        meter.on_microbatch(cu_seqlens=cu)  # makes the binding
        fast, binding = _batch._fastpath.on_microbatch, meter._binding
        env.update(fast=fast, binding=binding)
        stages[2:2] = [
            ("  the C fast path's call alone, cu_seqlens (checks, struct, the C++ hook)",
             "fast(binding, cu, None, grids, 0, 11, None, None)"),
            ("    the same without grids (the grids' checks are the difference)",
             "fast(binding, cu, None, None, 0, 11, None, None)"),
            ("  the C fast path's call alone, position_ids", "fast(binding, None, positions, grids, 0, 11, None, None)"),
            ("  the general path's stages:", None),
        ]
    results = [(stage[0], None if stage[1] is None else cost(*stage[1:])) for stage in stages]
    meter.close()
    return results


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15, help="rounds; the median is reported (default 15)")
    p.add_argument("--calls", type=int, default=2000, help="calls per variant and round (default 2000)")
    p.add_argument("--breakdown", action="store_true", help="also time each stage of the Python path")
    p.add_argument("--cold", action="store_true",
                   help="write a 32 MiB buffer before every call (untimed), as a training loop's forward and "
                        "backward evict the caches before the hook runs; use fewer --calls")
    p.add_argument("--json", help="write the per-round times and the summary there")
    args = p.parse_args(argv)
    torch.set_num_threads(1)

    times = run(args.rounds, args.calls, args.cold)
    cpu = {name: statistics.median(t[0] for t in values) for name, values in times.items()}
    wall = {name: statistics.median(t[1] for t in values) for name, values in times.items()}
    print(f"Python on_microbatch, 32,768-token row of 11 documents and 8 images (qwen3_vl_2b), CPU tensors; "
          f"median of {args.rounds} rounds x {args.calls} calls{', cold caches' if args.cold else ''}, "
          f"flopmeter {flopmeter.__version__} "
          f"({flopmeter.__file__}), torch {torch.__version__}")
    print("  (CPU time of the calling thread per call; wall time, which a shared machine inflates, in brackets)")
    summary: Dict[str, object] = {}
    for name in times:
        low = min(t[0] for t in times[name])
        high = max(t[0] for t in times[name])
        print(f"  {name:31s} {cpu[name]:8.2f} us/call CPU (min {low:.2f}, max {high:.2f})   [wall {wall[name]:.2f}]")
    for fmt, goal in GOALS.items():
        name = f"flopmeter {fmt}"
        ratio = cpu["reference (torch ops)"] / cpu[name]
        ratio_wall = wall["reference (torch ops)"] / wall[name]
        verdict = "meets" if ratio >= goal else "MISSES"
        summary[fmt] = {"cpu_us_per_call": cpu[name], "wall_us_per_call": wall[name], "ratio_cpu": ratio,
                        "ratio_wall": ratio_wall, "goal": goal}
        print(f"  reference / flopmeter {fmt:13s} {ratio:6.2f}x   (goal >= {goal:g}x: {verdict})   "
              f"[wall {ratio_wall:.2f}x]")
    summary["reference"] = {"cpu_us_per_call": cpu["reference (torch ops)"],
                            "wall_us_per_call": wall["reference (torch ops)"]}
    if args.breakdown:
        print("Where a call's time goes (each stage alone, CPU time, min of 5 x "
              f"{args.calls * 5} calls; the stages add up to the whole call only approximately):")
        stages = breakdown(args.calls * 5)
        for name, value in stages:
            print(f"  {name}" if value is None else f"  {name:78s} {value:7.3f} us")
        summary["breakdown_us"] = dict(stages)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": times, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
