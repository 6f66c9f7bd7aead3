"""Meter fed CUDA tensors: no device sync on the micro-batch path (the index arrays are copied to pinned host
memory with non_blocking copies and counted on the host when their event has fired), the same records as the
CPU path, and the wait that perf/log_wait_ms reports.

Skipped where torch has no CUDA device (CI, the development machine); scripts/gpu_check_python.sh runs it on a
GPU machine. FLOPMETER_TEST_DEVICE_PATH_ON_CPU=1 runs the same assertions (except the sync check, which
needs CUDA) through the device path on CPU tensors, so that the test's own logic can be checked without a GPU.

The batches (tiny_vlm: spatial_merge_size 2, so 4 patches per merged token):
    A  cu_seqlens [0, 30, 80, 100], padding 4, images (1, 4, 4), (2, 2, 2)  3 documents, 3 samples
    B  cu_seqlens [0, 64], padding 0, image (1, 8, 8)                        1 document, 1 sample
    C  cu_seqlens [0, 10, 30, 60, 100, 128], padding 0, no image              5 documents, 5 samples
By hand: real tokens A 100, B 64, C 128; causal pairs sum L(L+1)/2: A 30*31/2 + 50*51/2 + 20*21/2 = 465 +
1275 + 210 = 1950, B 64*65/2 = 2080, C 55 + 210 + 465 + 820 + 406 = 1956; patches A 16 + 8 = 24, B 64, C 0;
merged tokens A 4 + 2 = 6, B 16.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import flopmeter  # noqa: E402
from conftest import REPO  # noqa: E402

ON_CPU = os.environ.get("FLOPMETER_TEST_DEVICE_PATH_ON_CPU") == "1"
if not ON_CPU and not torch.cuda.is_available():
    pytest.skip("no CUDA device (scripts/gpu_check_python.sh runs this on a GPU machine)", allow_module_level=True)

DEVICE = torch.device("cpu") if ON_CPU else torch.device("cuda", 0)

BATCHES = [
    {"cu_seqlens": [0, 30, 80, 100], "padding_tokens": 4, "grid_thw": [[1, 4, 4], [2, 2, 2]], "samples": 3,
     "loss_sum": 250.0, "label_tokens": 97},
    {"cu_seqlens": [0, 64], "padding_tokens": 0, "grid_thw": [[1, 8, 8]], "samples": 1,
     "loss_sum": 120.5, "label_tokens": 47},
    {"cu_seqlens": [0, 10, 30, 60, 100, 128], "padding_tokens": 0, "grid_thw": None, "samples": 5,
     "loss_sum": 300.25, "label_tokens": 123},
]
# Interval by interval (on_log after each group): [A, B], [C, A], [B].
INTERVALS = [[0, 1], [2, 0], [1]]
# Running real tokens: 100 + 64 = 164; + 128 + 100 = 392; + 64 = 456. Samples: 4; 4 + 5 + 3 = 12; 13.
EXPECTED_TOKENS_SEEN = [164, 392, 456]
EXPECTED_NUM_SAMPLES = [4, 12, 13]
# Loss per token: (250 + 120.5) / (97 + 47); (300.25 + 250) / (123 + 97); 120.5 / 47.
EXPECTED_LOSS = [370.5 / 144, 550.25 / 220, 120.5 / 47]
COUNT_KEYS = ("train/tokens_seen", "train/num_samples", "train/loss", "train/batch_efficiency",
              "health/bad_microbatches", "health/failed_collectives", "health/skipped_intervals")


def _meter() -> flopmeter.Meter:
    return flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1000.0}, sinks={"console": False})


def _on_device(batch, device, *, scalars_as_tensors=True):
    """The batch as tensors on `device` (cu_seqlens int32, as varlen kernels take it; grids int64)."""
    out = {"cu_seqlens": torch.tensor(batch["cu_seqlens"], dtype=torch.int32, device=device),
           "padding_tokens": batch["padding_tokens"], "samples": batch["samples"]}
    if batch["grid_thw"] is not None:
        out["grid_thw"] = torch.tensor(batch["grid_thw"], dtype=torch.int64, device=device)
    if scalars_as_tensors:  # what a trainer holds: the loss sum and the label count on the device
        out["loss_sum"] = torch.tensor(batch["loss_sum"], dtype=torch.float32, device=device)
        out["label_tokens"] = torch.tensor(batch["label_tokens"], dtype=torch.int64, device=device)
    else:
        out["loss_sum"] = batch["loss_sum"]
        out["label_tokens"] = batch["label_tokens"]
    return out


def _on_host(batch):
    out = {"cu_seqlens": torch.tensor(batch["cu_seqlens"], dtype=torch.int64), "padding_tokens": batch["padding_tokens"],
           "samples": batch["samples"], "loss_sum": batch["loss_sum"], "label_tokens": batch["label_tokens"]}
    if batch["grid_thw"] is not None:
        out["grid_thw"] = torch.tensor(batch["grid_thw"], dtype=torch.int64)
    return out


@pytest.fixture
def device_path(monkeypatch):
    """On CPU (FLOPMETER_TEST_DEVICE_PATH_ON_CPU=1): route CPU tensors through the device path, which
    otherwise only tensors off the host take."""
    if ON_CPU:
        from flopmeter import _batch

        monkeypatch.setattr(_batch, "is_device_tensor",
                            lambda v: v is not None and _batch._is_torch_tensor(v))
        monkeypatch.setattr(_batch, "FAST_PATH", False)
    return DEVICE


class _no_sync:
    """torch.cuda.set_sync_debug_mode("error") for the block: any call that synchronises the host with the
    device raises RuntimeError. On CPU there is nothing to check."""

    def __enter__(self):
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()  # the batch's own copies are done before the check starts
            torch.cuda.set_sync_debug_mode("error")

    def __exit__(self, *exc):
        if DEVICE.type == "cuda":
            torch.cuda.set_sync_debug_mode(0)


def _run(meter, batches_for, device_batches, sync_check):
    records = []
    for step, interval in enumerate(INTERVALS, start=1):
        for i in interval:
            if sync_check:
                with _no_sync():
                    assert meter.on_microbatch(**device_batches[i]) is True
            else:
                assert meter.on_microbatch(**batches_for(i)) is True
        record = meter.on_log(step)
        if record is not None:
            records.append(record)
    last = meter.flush()
    if last is not None:
        records.append(last)
    return records


def _one_interval(model, batch):
    """The record of one interval of `batch` (on_microbatch keywords) in a Meter over `model`."""
    with flopmeter.Meter(model=model, peak={"tflops_per_gpu": 1000.0}, sinks={"console": False}) as meter:
        assert meter.on_microbatch(**batch) is True
        meter.on_log(1)
        record = meter.flush()
        health = meter.health
    return record, health


def test_device_counts_are_the_host_counts_exactly(device_path):
    """The device path counts its copies with the host counter: the exact FLOPs (train/flops_seen, linear in
    every count) and tokens of each batch are the host path's."""
    model = flopmeter.FlopModel("tiny_vlm")
    for batch in BATCHES:
        d = _on_device(batch, device_path)
        record, health = _one_interval("tiny_vlm", d)
        host = model.counts(cu_seqlens=batch["cu_seqlens"], grid_thw=batch["grid_thw"],
                            padding_tokens=batch["padding_tokens"])
        flops = model.flops(cu_seqlens=batch["cu_seqlens"], grid_thw=batch["grid_thw"],
                            padding_tokens=batch["padding_tokens"])
        assert record["train/flops_seen"] == float(flops), batch
        assert record["train/tokens_seen"] == host["real_tokens"], batch
        assert health["bad_microbatches"] == 0
    # Spot values derived by hand in the module docstring: A's causal pairs and merged tokens.
    a = model.counts(cu_seqlens=BATCHES[0]["cu_seqlens"], grid_thw=BATCHES[0]["grid_thw"])
    assert a["causal_pairs"] == 1950 and a["merged_tokens"] == 6 and a["patches"] == 24


# Grids of the vision-language families' real configs (tests/data/vlm): Qwen2.5-VL items whose merged grid is
# not a multiple of the 4 x 4 window and a video of 3 frames; InternVL images of 1 and 5 tiles; Gemma 3 images
# and pan-and-scan crops.
VLM_BATCHES = [
    ("qwen2.5-vl-3b-instruct.json", [[1, 36, 50], [3, 16, 16], [2, 6, 10]]),
    ("internvl3-8b-hf-partial.json", [[1, 32, 32], [5, 32, 32]]),
    ("gemma-3-4b-it.json", [[1, 64, 64], [3, 64, 64]]),
]


@pytest.mark.parametrize("config,grids", VLM_BATCHES)
def test_vision_counts_of_the_new_families_are_the_host_counts(device_path, config, grids):
    """Window pairs, CLS tokens and image-block pairs of the device path equal the host's exact counts (with the
    decoder's windows: Gemma 3 slides); a grid that is not a whole tile is refused as on the host."""
    path = str(REPO / "tests" / "data" / "vlm" / config)
    model = flopmeter.FlopModel(path)
    cu = torch.tensor([0, 700, 1000], dtype=torch.int64, device=device_path)
    thw = torch.tensor(grids, dtype=torch.int64, device=device_path)
    record, health = _one_interval(path, {"cu_seqlens": cu, "grid_thw": thw})
    host = model.counts(cu_seqlens=[0, 700, 1000], grid_thw=grids)
    assert host["vision_window_pairs"] + host["vision_cls_tokens"] + host["image_block_pairs"] > 0
    assert record["train/flops_seen"] == float(model.flops(cu_seqlens=[0, 700, 1000], grid_thw=grids))
    assert health["bad_microbatches"] == 0
    side = int((model.coefficients.get("vision_geometry") or {}).get("segment_side", 0))
    if side > 0:
        bad = torch.tensor([[1, side, side - 2]], dtype=torch.int64, device=device_path)
        _, health = _one_interval(path, {"cu_seqlens": cu, "grid_thw": bad})
        assert health["bad_microbatches"] == 1


def test_no_sync_on_the_microbatch_path_and_records_equal_the_cpu_path(device_path, capsys):
    device_batches = [_on_device(b, device_path) for b in BATCHES]  # made before the sync check
    with _meter() as on_gpu:
        gpu_records = _run(on_gpu, None, device_batches, sync_check=True)
        gpu_health = on_gpu.health
    with _meter() as on_cpu:
        cpu_records = _run(on_cpu, lambda i: _on_host(BATCHES[i]), None, sync_check=False)

    assert [r["step"] for r in gpu_records] == [1, 2, 3]
    assert [r["step"] for r in cpu_records] == [1, 2, 3]
    assert [r["train/tokens_seen"] for r in gpu_records] == EXPECTED_TOKENS_SEEN
    assert [r["train/num_samples"] for r in gpu_records] == EXPECTED_NUM_SAMPLES
    assert [r["train/loss"] for r in gpu_records] == pytest.approx(EXPECTED_LOSS, rel=1e-6)  # a float32 loss sum
    for g, c in zip(gpu_records, cpu_records):
        for key in COUNT_KEYS:
            if key == "train/loss":
                assert g[key] == pytest.approx(c[key], rel=1e-6)  # the device's loss came in float32
            else:
                assert g[key] == c[key], (g["step"], key)
        # TFLOP/s and tokens/s divide by each meter's own interval time; their ratio is FLOPs per real token,
        # which is the same number when the FLOPs are (up to the rounding of two divisions).
        assert g["perf/tflops_per_second"] / g["perf/tokens_per_second"] == \
            pytest.approx(c["perf/tflops_per_second"] / c["perf/tokens_per_second"], rel=1e-12)
    assert gpu_health["bad_microbatches"] == 0 and gpu_health["failed_collectives"] == 0
    waits = [r["perf/log_wait_ms"] for r in gpu_records]
    with capsys.disabled():
        print(f"\n[{DEVICE}] perf/log_wait_ms per record (device path): {', '.join(f'{w:.4f}' for w in waits)}")
        print(f"[{DEVICE}] perf/log_wait_ms per record (CPU path):    "
              f"{', '.join(format(r['perf/log_wait_ms'], '.4f') for r in cpu_records)}")
    assert all(w >= 0 for w in waits)


def test_no_sync_with_python_scalars_for_the_loss(device_path):
    """A trainer may pass loss_sum and label_tokens as Python numbers with CUDA batch tensors: still no sync."""
    device_batches = [_on_device(b, device_path, scalars_as_tensors=False) for b in BATCHES]
    with _meter() as meter:
        records = _run(meter, None, device_batches, sync_check=True)
    assert [r["train/tokens_seen"] for r in records] == EXPECTED_TOKENS_SEEN
    assert [r["train/loss"] for r in records] == pytest.approx(EXPECTED_LOSS, rel=1e-12)


def test_a_malformed_batch_is_refused_when_it_arrives(device_path):
    """cu_seqlens not starting at 0 cannot be seen without reading the tensor: it is queued (True, no sync),
    refused by the host counter when its copy arrives (at the log at the latest), and contributes nothing."""
    good = _on_device(BATCHES[0], device_path)
    bad = dict(good, cu_seqlens=torch.tensor([5, 30, 80, 100], dtype=torch.int32, device=device_path))
    with _meter() as meter:
        with _no_sync():
            assert meter.on_microbatch(**good) is True
            assert meter.on_microbatch(**bad) is True
        assert meter.on_log(1) is None  # the first log: its record comes one log later
        record = meter.on_log(2)
        health = meter.health
    assert record["step"] == 1
    assert record["train/tokens_seen"] == 100  # A's 100 real tokens; the bad batch adds none
    assert record["train/num_samples"] == 3
    assert record["health/bad_microbatches"] == 1
    assert health["bad_microbatches"] == 1
