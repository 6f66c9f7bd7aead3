"""A trainer that is SIGKILLed at a random moment (test_kill.py): logs as fast as it can through a Meter with a
JSONL and a TensorBoard sink, and prints each record's step once on_log has returned it (by then every sink
has written it)."""

from __future__ import annotations

import sys

import flopmeter


def main() -> None:
    jsonl, tensorboard = sys.argv[1], sys.argv[2]
    meter = flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1.0},
                            sinks={"console": False, "jsonl": jsonl, "tensorboard": tensorboard})
    print("ready", flush=True)
    step = 0
    while True:
        step += 1
        meter.on_microbatch(cu_seqlens=[0, 7, 19], grid_thw=[[1, 4, 4]], samples=2)
        record = meter.on_log(step)
        if record is not None:
            print(record["step"], flush=True)


if __name__ == "__main__":
    main()
