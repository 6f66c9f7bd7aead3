"""flopmeter.watch with the model and its batches on a CUDA device: the index arrays copied to pinned host
memory behind an event and read once it has fired (at the latest at the log), the interval timed with CUDA
events read one log later. Run by scripts/gpu_check_python.sh on a GPU machine; skipped without CUDA.

The expected FLOPs are tiny_vlm's FlopModel over the documents fed, written out by hand (as test_watch.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device (scripts/gpu_check_python.sh runs this on a GPU machine)", allow_module_level=True)

import flopmeter  # noqa: E402
from test_watch import OPTIONS, TinyLM, flops_of, padded  # noqa: E402

DEVICE = torch.device("cuda", 0)


def on_device(batch):
    return {key: value.to(DEVICE) for key, value in batch.items()}


def test_device_batches_are_counted_exactly_and_timed_with_events():
    model = TinyLM().to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    records = []
    meter = flopmeter.watch(model, optimizer, on_record=records.append, **OPTIONS)
    assert meter._clock.cuda
    steps = [[([3, 5], 6), ([4], 4)], [([6, 6], 6)], [([2, 7, 1], 7), ([5], 5)]]
    expected = []
    for step in steps:
        for lengths, width in step:
            model(**on_device(padded(lengths, width)))["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(sum(flops_of(lengths, width) for lengths, width in step))
        # Whole rows on the device: their shape is all that is read (no copy).
        model(input_ids=torch.randint(1, 64, (2, 8), device=DEVICE))["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(flops_of([8, 8], 8))
    meter.close()
    assert [r["step"] for r in records] == list(range(1, 2 * len(steps) + 1))
    for i, record in enumerate(records):
        assert record["train/flops_seen"] == sum(expected[: i + 1])
        assert 0 < record["perf/in_step_time"] <= record["perf/wall_time"]
        assert 0 < record["perf/goodput"] <= 1
    assert meter.health.get("bad_microbatches", 0) == 0
