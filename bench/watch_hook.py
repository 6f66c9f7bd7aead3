"""What flopmeter.watch's forward pre-hook costs per training micro-batch, against a bare forward hook.

Three variants of the same call, `model(input_ids=ids)` on a module whose forward does nothing (so the call
itself is all that is timed), with `ids` an int64 [8, 4096] CPU tensor (whole rows: 8 documents of 4096 tokens):
  - bare:   the module with one forward pre-hook that does nothing (torch 2: with_kwargs=True; torch 1.13: the
            forward wrapped on the instance, as watch does there);
  - watch:  the module under flopmeter.watch (training mode, gradients on): the training checks, the step's time
            mark, the batch read and Meter.on_microbatch through the C fast path;
  - meter:  meter.on_microbatch(cu_seqlens=<the same rows' boundaries>, samples=8) alone, the C fast path.
The hook's own cost is (watch - bare) - meter: what the hook adds in Python beyond the C fast path (goal <= 5 us).
A padded batch (input_ids + attention_mask), which the batch reader reads with torch ops, is timed beside it
for information.

Each round times every variant over the same number of calls, in a rotating order, so a load spike on a shared
machine hits all of them; the report is the median over rounds of the calling thread's CPU time per call. Timings depend on the
machine and its load: reported here, never asserted in tests.

Usage: python bench/watch_hook.py [--rounds 15] [--calls 2000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable, Dict, List

import torch

import flopmeter
from flopmeter import _batch
from flopmeter.integrations import _hooks

ROWS, LENGTH = 8, 4096
GOAL_US = 5.0


class Empty(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids=None, attention_mask=None):
        return None


def timed(call: Callable[[], None], calls: int) -> float:
    """The calling thread's CPU time per call, in us (a shared machine's load does not count against it)."""
    begin = time.thread_time()
    for _ in range(calls):
        call()
    return (time.thread_time() - begin) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", help="write the medians to this file")
    args = parser.parse_args()

    options = dict(model="qwen3_vl_2b", peak={"tflops_per_gpu": 1000.0}, sinks={"console": False})
    ids = torch.randint(0, 1000, (ROWS, LENGTH))
    mask = torch.ones(ROWS, LENGTH, dtype=torch.int64)
    mask[:, -100:] = 0

    bare = Empty().train()
    handles = _hooks._Handles()
    _hooks.install_forward(torch, bare, lambda a, k: None, None, _hooks.torch_has_hooks(torch), handles)

    watched = Empty().train()
    meter = flopmeter.watch(watched, log_every=None, **options)
    alone = flopmeter.Meter(**options)
    cu = torch.arange(0, ROWS * LENGTH + 1, LENGTH, dtype=torch.int64)

    variants: Dict[str, Callable[[], None]] = {
        "bare": lambda: bare(input_ids=ids),
        "watch": lambda: watched(input_ids=ids),
        "meter": lambda: alone.on_microbatch(cu_seqlens=cu, samples=ROWS),
        "watch_padded": lambda: watched(input_ids=ids, attention_mask=mask),
        "bare_padded": lambda: bare(input_ids=ids, attention_mask=mask),
    }
    results: Dict[str, List[float]] = {name: [] for name in variants}
    names = list(variants)
    for round_ in range(args.rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            results[name].append(timed(variants[name], args.calls))
    medians = {name: statistics.median(values) for name, values in results.items()}
    hook = medians["watch"] - medians["bare"] - medians["meter"]
    report = {
        "torch": torch.__version__, "native_hooks": _hooks.torch_has_hooks(torch),
        "c_fast_path": bool(_batch.NATIVE_FAST_PATH), "rounds": args.rounds, "calls": args.calls,
        "us_per_call": medians, "hook_over_c_fast_path_us": hook,
        "padded_hook_us": medians["watch_padded"] - medians["bare_padded"], "goal_us": GOAL_US,
    }
    meter.close()
    alone.close()
    handles.remove()
    for name, value in medians.items():
        print(f"{name:>14}: {value:8.2f} us per call")
    print(f"watch's hook over the C fast path: {hook:.2f} us per micro-batch (goal <= {GOAL_US} us: "
          f"{'met' if hook <= GOAL_US else 'NOT met'}); torch {torch.__version__}, "
          f"{'torch hooks' if report['native_hooks'] else 'wrapped forward'}, C fast path "
          f"{'on' if report['c_fast_path'] else 'off'}")
    print(f"a padded batch (read by the batch reader's torch ops): {report['padded_hook_us']:.1f} us over a bare hook")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
