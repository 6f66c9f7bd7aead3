"""Meter in one process: the records, the life cycle, every input form, bad input, threads, the device path."""

from __future__ import annotations

import gc
import json
import logging
import math
import sys
import threading
import time

import pytest

import flopmeter
from flopmeter import _batch, _distributed

QUIET = {"console": False}

# Time-independent fields of a record: what two runs of the same batches must agree on exactly.
EXACT_FIELDS = ("train/tokens_seen", "train/num_samples", "train/loss", "train/batch_efficiency", "perf/mem_gib")


def flops_per_token(record):
    """FLOPs per real token of the interval: TFLOP/s over tokens/s, in which the interval's time cancels."""
    return record["perf/tflops_per_second"] * 1e12 / record["perf/tokens_per_second"]


def test_one_interval_by_hand():
    # tiny_vlm, one interval of one micro-batch: documents of 3 and 5 tokens, 2 padding tokens, one 1x4x4 image;
    # 2 samples; loss sum 30 over 6 label tokens; peak memory 2^30 bytes.
    #   train/tokens_seen = 8 (real tokens), train/num_samples = 2, train/loss = 30 / 6 = 5,
    #   train/batch_efficiency = 8 / (8 + 2) = 0.8, perf/mem_gib = 2^30 / 2^30 = 1,
    #   FLOPs per real token = FlopModel.flops(...) / 8 (tokens/s and TFLOP/s share the interval).
    batch = dict(document_lengths=[3, 5], padding_tokens=2, grid_thw=[[1, 4, 4]])
    flops = flopmeter.FlopModel("tiny_vlm").flops(**batch)
    with flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1.0}, sinks=QUIET) as meter:
        assert meter.on_log(0) is None  # a warm-up log: no record, now or later
        assert meter.on_microbatch(**batch, samples=2, loss_sum=30.0, label_tokens=6)
        time.sleep(0.01)
        assert meter.on_log(1, forward_backward_time=0.002, peak_memory_bytes=2**30,
                            peak_reserved_memory_bytes=3 * 2**29) is None  # read one log later
        record = meter.flush()
    assert record["step"] == 1
    assert record["train/tokens_seen"] == 8 and record["train/num_samples"] == 2
    assert record["train/loss"] == 5 and record["train/batch_efficiency"] == 0.8 and record["perf/mem_gib"] == 1
    assert record["perf/mem_reserved_gib"] == 1.5  # 3 x 2^29 bytes = 1.5 GiB
    assert record["train/assistant_tokens_seen"] == 6  # the label tokens so far
    assert record["train/flops_seen"] == flops  # the exact FLOPs so far: this one micro-batch
    assert record["train/max_loss"] == 5  # one DP rank: its mean loss
    assert "perf/data_time_pct" not in record  # no data time was reported
    assert record["perf/fwd_bwd_time"] == 0.002
    assert flops_per_token(record) == pytest.approx(flops / 8, rel=1e-12)
    assert record["perf/mfu"] == pytest.approx(record["perf/tflops_per_second"] / 1.0 * 100, rel=1e-12)
    assert record["perf/step_time"] > 0.01  # one micro-batch in an interval of at least the 10 ms slept
    assert record["health/bad_microbatches"] == 0


def force_the_device_path(monkeypatch):
    """The path CUDA tensors take (copied to the host, counted when they arrive: _device_queue.py), for every
    torch tensor, CPU ones included."""
    monkeypatch.setattr(_batch, "is_device_tensor", lambda value: _batch._is_torch_tensor(value))
    monkeypatch.setattr(_batch, "FAST_PATH", False)


@pytest.mark.parametrize("path", ["host", "device", "mixed"])
def test_flops_seen_is_the_exact_running_total_past_2_53(monkeypatch, path):
    # tiny_vlm, three intervals of one document of L = 100,000,001 tokens: its L(L+1)/2 = 5.0e15 causal pairs
    # make each interval's FLOPs F (FlopModel.flops, an exact int) pass 2^53 = 9.0e15. train/flops_seen after
    # interval k is k x F, exact as an integer and rounded once to the record's double: float(k * F). Summing
    # the interval figures as doubles would round at each addition instead.
    # "device": the same document as a tensor through the device path (_device_queue.py, here on CPU tensors),
    # counted by the same host counter: the same exact figure.
    # "mixed": each interval also runs a device micro-batch of M = 50,000,001 tokens (FLOPs F2) beside the host
    # one of L: k x (F + F2), both in the one running total. (M, not L: the interval's causal pairs, 5.0e15 +
    # 1.25e15, stay below the 2^53 a row's count carries.)
    import torch

    length = 100_000_001
    model = flopmeter.FlopModel("tiny_vlm")
    f = model.flops(document_lengths=[length])
    other = 50_000_001
    f2 = model.flops(document_lengths=[other])
    assert f > 2**53
    if path != "host":
        force_the_device_path(monkeypatch)
    batches = {"host": [dict(document_lengths=[length])],
               "device": [dict(document_lengths=torch.tensor([length]))],
               "mixed": [dict(document_lengths=[length]), dict(document_lengths=torch.tensor([other]))]}[path]
    per_interval = f + f2 if path == "mixed" else f
    records = []
    with flopmeter.Meter(model="tiny_vlm", sinks=QUIET) as meter:
        for step in (1, 2, 3):
            for batch in batches:
                assert meter.on_microbatch(**batch, samples=1)
            records.append(meter.on_log(step))
        records.append(meter.flush())
    seen = [r["train/flops_seen"] for r in records if r is not None]
    assert seen == [float(per_interval), float(2 * per_interval), float(3 * per_interval)]
    assert records[-1]["train/tokens_seen"] == 3 * (length + other if path == "mixed" else length)


@pytest.mark.parametrize("path", ["host", "device"])
def test_a_lost_intervals_flops_count_in_flops_seen_like_its_tokens(monkeypatch, path):
    # Three intervals of one 1000-token document each; the collective of step 2 fails (its wait, the second,
    # reports a failure), so step 2 has no record. Its tokens and FLOPs still join the running totals, which
    # every row carries: the record of step 3 has tokens_seen 3 x 1000 and flops_seen 3 F (F = FlopModel.flops
    # of the document), on the host path and on the device path alike (both count on the host).
    import torch

    original = _distributed.TorchCollective._wait_for
    waits = []

    def wait_failing_the_second(self, user, handle, timeout_ms):
        waits.append(handle)
        return -1 if len(waits) == 2 else original(self, user, handle, timeout_ms)

    monkeypatch.setattr(_distributed.TorchCollective, "_wait_for", wait_failing_the_second)
    if path == "device":
        force_the_device_path(monkeypatch)
    batch = dict(document_lengths=torch.tensor([1000]) if path == "device" else [1000], samples=1)
    f = flopmeter.FlopModel("tiny_vlm").flops(document_lengths=[1000])
    with flopmeter.Meter(model="tiny_vlm", sinks=QUIET) as meter:
        records = []
        for step in (1, 2, 3):
            assert meter.on_microbatch(**batch)
            records.append(meter.on_log(step))
        records.append(meter.flush())
        health = meter.health
    emitted = [r for r in records if r is not None]
    assert [r["step"] for r in emitted] == [1, 3]
    assert health["failed_collectives"] == 1
    assert [r["train/tokens_seen"] for r in emitted] == [1000, 3000]
    assert [r["train/flops_seen"] for r in emitted] == [f, 3 * f]


def run(batches, steps=3, **meter_args):
    """The records of `steps` intervals of `batches` (a list of on_microbatch keyword dicts) each."""
    records = []
    with flopmeter.Meter(model="qwen3_vl_2b", peak={"gpu": "H100 SXM"}, sinks=QUIET, **meter_args) as meter:
        for step in range(1, steps + 1):
            for b in batches:
                assert meter.on_microbatch(**b)
            time.sleep(0.002)
            r = meter.on_log(step)
            if r is not None:
                records.append(r)
        records.append(meter.flush())
        health = meter.health
    return records, health


def test_cpu_tensor_numpy_and_list_inputs_give_identical_records():
    import numpy as np
    import torch

    cu = [0, 1000, 1800, 4096]
    grids = [[1, 16, 16], [2, 8, 12]]
    forms = {
        "list": dict(cu_seqlens=cu, grid_thw=grids),
        "numpy": dict(cu_seqlens=np.array(cu), grid_thw=np.array(grids)),
        "tensor": dict(cu_seqlens=torch.tensor(cu), grid_thw=torch.tensor(grids)),
        "int32 tensor": dict(cu_seqlens=torch.tensor(cu, dtype=torch.int32), grid_thw=torch.tensor(grids)),
        "positions": dict(position_ids=torch.cat([torch.arange(1000), torch.arange(800), torch.arange(2296)]),
                          grid_thw=torch.tensor(grids)),
        "lengths": dict(document_lengths=[1000, 800, 2296], grid_thw=grids),
    }
    flops = flopmeter.FlopModel("qwen3_vl_2b").flops(cu_seqlens=cu, grid_thw=grids)
    results = {}
    for name, batch in forms.items():
        records, health = run([dict(batch, samples=3, loss_sum=12.5, label_tokens=100)])
        assert health["bad_microbatches"] == 0
        results[name] = [({f: r[f] for f in EXACT_FIELDS if f in r}, flops_per_token(r)) for r in records]
    reference = results["list"]
    assert [r[0]["train/tokens_seen"] for r in reference] == [4096, 8192, 12288]
    for name, got in results.items():
        assert [g[0] for g in got] == [r[0] for r in reference], name
        for g, _ in zip(got, reference):
            assert g[1] == pytest.approx(flops / 4096, rel=1e-12), name


@pytest.mark.parametrize("frozen", [None, ["text"]])
def test_the_device_path_run_on_host_tensors_gives_the_host_paths_records(monkeypatch, frozen, caplog):
    """The path CUDA tensors take (copied to the host, counted on arrival), forced on CPU tensors: the records
    equal the host path's, the Megatron figures included; with a frozen decoder the micro-batch without images
    is billed by its own coefficients on both paths."""
    import torch

    batches = [
        dict(cu_seqlens=torch.tensor([0, 700, 2000]), grid_thw=torch.tensor([[1, 8, 8], [3, 4, 6]]), samples=2,
             loss_sum=torch.tensor(7.0), label_tokens=torch.tensor(70)),
        dict(position_ids=torch.cat([torch.arange(50), torch.arange(10)]), padding_tokens=4, samples=1),
    ]
    extra = {} if frozen is None else {"frozen": frozen}
    host_records, host_health = run(batches, **extra)
    force_the_device_path(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="flopmeter"):
        device_records, device_health = run(batches, **extra)
    assert len(device_records) == len(host_records) == 3
    # train/flops_seen: the device path's micro-batches are counted by the host counter, so every record carries
    # the host path's exact figure, without a warning. With the decoder frozen, the micro-batch without images
    # takes the coefficients of the itemless counts.
    model = flopmeter.FlopModel("qwen3_vl_2b", **extra)
    per_interval = sum(model.flops(**{k: v for k, v in b.items() if k in ("cu_seqlens", "position_ids", "grid_thw",
                                                                           "padding_tokens")}) for b in batches)
    assert [h["train/flops_seen"] for h in host_records] == [float(k * per_interval) for k in (1, 2, 3)]
    assert [d["train/flops_seen"] for d in device_records] == [h["train/flops_seen"] for h in host_records]
    assert not any("flops_seen" in r.getMessage() for r in caplog.records)
    for d, h in zip(device_records, host_records):
        assert {f: d.get(f) for f in EXACT_FIELDS} == {f: h.get(f) for f in EXACT_FIELDS}
        assert flops_per_token(d) == pytest.approx(flops_per_token(h), rel=1e-12)
        megatron = d["perf/tflops_per_second_megatron"] / d["perf/tokens_per_second"]
        assert megatron == pytest.approx(h["perf/tflops_per_second_megatron"] / h["perf/tokens_per_second"],
                                         rel=1e-12)
        assert d["train/frozen_text"] == h["train/frozen_text"] == (0 if frozen is None else 1)
    assert device_health == host_health


def test_the_device_path_masks_a_malformed_batch_and_counts_it(monkeypatch):
    import torch

    monkeypatch.setattr(_batch, "is_device_tensor", lambda value: _batch._is_torch_tensor(value))
    monkeypatch.setattr(_batch, "FAST_PATH", False)
    good = dict(cu_seqlens=torch.tensor([0, 100]), samples=1)
    bad = dict(cu_seqlens=torch.tensor([0, 100, 50]), samples=5)  # decreasing: found on arrival, not raised
    records, health = run([good, bad], steps=2)
    # Only the good batch counts: 100 tokens and 1 sample per interval; the bad one is refused when it arrives,
    # counted in bad_microbatches (2 intervals -> 2).
    assert [r["train/tokens_seen"] for r in records] == [100, 200]
    assert [r["train/num_samples"] for r in records] == [1, 2]
    assert health["bad_microbatches"] == 2


def test_a_config_file_and_the_same_tables_in_code_agree(tmp_path):
    model = flopmeter.model_configs_dir() / "tiny_vlm.toml"
    plugin = tmp_path / "plugin.toml"
    plugin.write_text(f'[model]\nconfig = "{model}"\n\n[peak]\ntflops_per_gpu = 2.0\n\n[sinks]\nconsole = false\n'
                      f'jsonl = "{tmp_path / "m.jsonl"}"\n')
    with flopmeter.Meter(plugin) as meter:
        assert meter.model.name == "tiny_vlm"
        meter.on_microbatch(cu_seqlens=[0, 10])
        meter.on_log(1)
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    assert [json.loads(line)["train/tokens_seen"] for line in lines] == [10]
    with flopmeter.Meter({"model": {"config": "tiny_vlm"}, "peak": {"tflops_per_gpu": 2.0}}, sinks=QUIET) as meter:
        assert meter.model.coefficients == flopmeter.FlopModel(model).coefficients


def test_config_errors_name_the_key_path_in_code_and_line_and_column_in_a_file(tmp_path):
    # Configuration given in code names the key path only, no line:col of a text the user never wrote.
    with pytest.raises(flopmeter.ConfigError, match=r"^key 'parallel\.tp': must be > 0"):
        flopmeter.Meter(model="tiny_vlm", parallel={"tp": 0})
    with pytest.raises(flopmeter.ConfigError, match=r"unknown key 'parallel\.tpp'"):
        flopmeter.Meter(model="tiny_vlm", parallel={"tpp": 2})
    with pytest.raises(flopmeter.ConfigError, match="key 'parallel': tp\\*cp\\*pp = 2\\*1\\*1 exceeds world_size 1"):
        flopmeter.Meter(model="tiny_vlm", parallel={"tp": 2})
    with pytest.raises(flopmeter.ConfigError, match="key 'pipeline': not a table"):
        flopmeter.Meter({"model": "tiny_vlm", "pipeline": {"pp": 2}})
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nconfig = "nowhere.toml"\n')
    with pytest.raises(flopmeter.ConfigError, match=str(bad) + r":2:\d+"):
        flopmeter.Meter(bad)
    with pytest.raises(TypeError, match="not both"):
        flopmeter.Meter(bad, peak={"gpu": "H100 SXM"})
    with pytest.raises(TypeError):
        flopmeter.Meter(model="tiny_vlm", paralel={"tp": 1})  # an unknown keyword


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(cu_seqlens=[0.5, 2]), TypeError, "cu_seqlens must hold ints"),
    (dict(document_lengths=[2, -3]), ValueError, "invalid micro-batch"),
    (dict(cu_seqlens=[0, 2], samples=-1), ValueError, "samples must be >= 0"),
    (dict(cu_seqlens=[0, 2], samples=True), TypeError, "samples must be an int"),
    (dict(cu_seqlens=[0, 2], loss_sum=float("nan"), label_tokens=1), ValueError, "loss_sum must be finite"),
    (dict(cu_seqlens=[0, 2], loss_sum=1.0), ValueError, "give loss_sum and label_tokens together"),
    (dict(cu_seqlens=[0, 2], loss_sum=1.0, label_tokens=3), ValueError, "label_tokens 3 exceed"),
    (dict(cu_seqlens=[0, 2], grid_thw=[[1, 2, 2, 2]]), ValueError, "grid_thw must have shape"),
])
def test_bad_micro_batches_raise_before_anything_is_counted(kwargs, error, words):
    with flopmeter.Meter(model="qwen3_vl_2b", sinks=QUIET, peak={"gpu": "H100 SXM"}) as meter:
        with pytest.raises(error) as info:
            meter.on_microbatch(**kwargs)
        assert words in str(info.value)
        meter.on_microbatch(cu_seqlens=[0, 7], samples=1)
        meter.on_log(1)
        record = meter.flush()
    assert record["train/tokens_seen"] == 7 and record["train/num_samples"] == 1


def test_after_flush_and_after_close_nothing_is_counted_and_nothing_breaks():
    meter = flopmeter.Meter(model="tiny_vlm", sinks=QUIET, peak={"tflops_per_gpu": 1.0})
    meter.on_microbatch(cu_seqlens=[0, 5])
    meter.on_log(1)
    assert meter.flush()["train/tokens_seen"] == 5
    assert meter.on_microbatch(cu_seqlens=[0, 5]) is False
    assert meter.on_log(2) is None
    assert meter.flush() is None
    assert meter.health["events_after_flush"] == 2
    meter.close()
    assert meter.on_microbatch(cu_seqlens=[0, 5]) is False and meter.on_log(3) is None and meter.close() is None
    assert meter.health["events_after_flush"] == 2  # the counters as they were at close
    assert "closed" in repr(meter)


def test_a_meter_garbage_collected_without_flush_flushes(tmp_path):
    path = tmp_path / "m.jsonl"
    meter = flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1.0},
                            sinks={"console": False, "jsonl": str(path)})
    meter.on_microbatch(cu_seqlens=[0, 11])
    meter.on_log(1)
    assert path.read_text() == ""  # the record of step 1 is due at the next log, or at flush
    del meter
    gc.collect()
    assert [json.loads(line)["train/tokens_seen"] for line in path.read_text().splitlines()] == [11]


def test_calls_from_several_threads_are_all_counted():
    with flopmeter.Meter(model="tiny_vlm", sinks=QUIET, peak={"tflops_per_gpu": 1.0}) as meter:
        def feed():
            for _ in range(500):
                meter.on_microbatch(cu_seqlens=[0, 3, 7], samples=1)

        threads = [threading.Thread(target=feed) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        meter.on_log(1)
        record = meter.flush()
    # 4 threads x 500 micro-batches of 7 tokens.
    assert record["train/tokens_seen"] == 4 * 500 * 7 and record["train/num_samples"] == 2000


def test_health_and_repr():
    with flopmeter.Meter(model="tiny_vlm", sinks=QUIET, peak={"tflops_per_gpu": 1.0}) as meter:
        assert set(meter.health) >= {"bad_microbatches", "failed_collectives", "skipped_intervals",
                                     "out_of_step_intervals", "dropped_records", "reentrant_calls"}
        assert all(v == 0 for v in meter.health.values())
        assert "tiny_vlm" in repr(meter) and "rank 0 of 1" in repr(meter)


def test_a_tensor_on_another_device_than_the_meters_is_refused(monkeypatch):
    import torch

    monkeypatch.setattr(_batch, "is_device_tensor", lambda value: _batch._is_torch_tensor(value))
    monkeypatch.setattr(_batch, "FAST_PATH", False)
    with flopmeter.Meter(model="tiny_vlm", sinks=QUIET, peak={"tflops_per_gpu": 1.0}) as meter:
        assert meter.on_microbatch(cu_seqlens=torch.tensor([0, 5]))  # the meter now counts on the CPU
        with pytest.raises(ValueError, match="the batch is on meta, this meter counts on cpu"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 5], device="meta"))
        with pytest.raises(ValueError, match="grid_thw is on meta, the batch's other tensors on cpu"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 5]), grid_thw=torch.ones(1, 3, dtype=torch.int64,
                                                                                           device="meta"))
        meter.on_log(1)
        assert meter.flush()["train/tokens_seen"] == 5


# The two host paths for plain CPU tensors: the C fast path (flopmeter/_fastpath.c) and the one general path
# that converts every form (what a package built without Python's headers takes for everything).
HOST_PATHS = {
    "c": dict(NATIVE_FAST_PATH=True, FAST_PATH=True),
    "general": dict(NATIVE_FAST_PATH=False, FAST_PATH=False),
}


def take_host_path(monkeypatch, path):
    for name, value in HOST_PATHS[path].items():
        monkeypatch.setattr(_batch, name, value)


def test_the_package_built_here_has_the_c_fast_path():
    # scripts/deps.sh installs python3-dev, so the wheel the suite tests carries flopmeter/_fastpath; a build
    # without Python's headers (FLOPMETER_EXPECT_NO_FASTPATH=1) takes the general path.
    import os

    assert _batch.NATIVE_FAST_PATH is (os.environ.get("FLOPMETER_EXPECT_NO_FASTPATH") != "1")


@pytest.mark.parametrize("path", ["c"])
def test_the_fast_path_for_cpu_tensors_gives_the_general_paths_records(monkeypatch, path):
    import torch

    batches = [
        dict(cu_seqlens=torch.tensor([0, 700, 2000]), grid_thw=torch.tensor([[1, 8, 8], [3, 4, 6]]), samples=2,
             loss_sum=7.0, label_tokens=70),
        dict(position_ids=torch.cat([torch.arange(50), torch.arange(10)]), padding_tokens=4, samples=1),
        dict(position_ids=torch.arange(33, dtype=torch.int32), samples=1),
        dict(cu_seqlens=torch.tensor([0, 8]), grid_thw=torch.zeros(0, 3, dtype=torch.int64)),
    ]
    if path == "c" and not _batch.NATIVE_FAST_PATH:
        pytest.skip("this package was built without its C fast path")
    take_host_path(monkeypatch, path)
    fast_records, fast_health = run(batches)
    take_host_path(monkeypatch, "general")
    general_records, general_health = run(batches)
    for f, g in zip(fast_records, general_records):
        assert {k: f.get(k) for k in EXACT_FIELDS} == {k: g.get(k) for k in EXACT_FIELDS}
        assert flops_per_token(f) == pytest.approx(flops_per_token(g), rel=1e-12)
    assert fast_records[0]["train/tokens_seen"] == 2000 + 60 + 33 + 8
    assert fast_health == general_health


def test_the_c_fast_path_is_the_one_a_plain_cpu_batch_takes(monkeypatch):
    import torch

    if not _batch.NATIVE_FAST_PATH:
        pytest.skip("this package was built without its C fast path")
    taken = []
    real = _batch._fastpath

    class Spy:
        Binding = real.Binding
        disable = real.disable

        @staticmethod
        def on_microbatch(*args):
            code = real.on_microbatch(*args)
            taken.append(code)
            return code

    monkeypatch.setattr(_batch, "_fastpath", Spy)
    with flopmeter.Meter(model="tiny_vlm", sinks=QUIET, peak={"tflops_per_gpu": 1.0}) as meter:
        assert meter.on_microbatch(cu_seqlens=torch.tensor([0, 5]), samples=1)
        # Forms the C path leaves to the others (it answers None, nothing counted there): a strided view
        # ([0, 5], stride 2), a Parameter (a Tensor subclass), a list.
        assert meter.on_microbatch(cu_seqlens=torch.tensor([0, 9, 5, 10])[::2])
        assert meter.on_microbatch(cu_seqlens=torch.nn.Parameter(torch.tensor([0, 3]), requires_grad=False))
        assert meter.on_microbatch(cu_seqlens=[0, 2], samples=1)
        meter.on_log(1)
        record = meter.flush()
        assert taken == [0, None, None, None]
        assert record["train/tokens_seen"] == 5 + 5 + 3 + 2
    # After close, the C path answers "invalid handle" without calling the library: on_microbatch is False.
    assert meter.on_microbatch(cu_seqlens=torch.tensor([0, 5])) is False


@pytest.mark.parametrize("path", ["c", "general"])
def test_the_fast_path_refuses_what_the_general_path_refuses(monkeypatch, path):
    import torch

    if path == "c" and not _batch.NATIVE_FAST_PATH:
        pytest.skip("this package was built without its C fast path")
    take_host_path(monkeypatch, path)
    with flopmeter.Meter(model="qwen3_vl_2b", sinks=QUIET, peak={"gpu": "H100 SXM"}) as meter:
        with pytest.raises(ValueError, match="invalid micro-batch"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 9, 4]))
        with pytest.raises(ValueError, match="invalid micro-batch"):
            meter.on_microbatch(position_ids=torch.tensor([0, 1, 5]))
        with pytest.raises(ValueError, match="invalid micro-batch"):
            meter.on_microbatch(position_ids=torch.tensor([3, 4], dtype=torch.int32))
        with pytest.raises(ValueError, match="label_tokens 9 exceed"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 4]), loss_sum=1.0, label_tokens=9)
        with pytest.raises(TypeError, match="must be a dense tensor"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 4]).to_sparse())
        assert meter.health["bad_microbatches"] == 4
        # What the fast paths leave to the general path, which names the argument:
        two_columns = torch.tensor([[1, 2, 2, 0], [1, 4, 4, 0]])[:, :3][:, :2]  # stride (4, 1), 2 columns
        with pytest.raises(ValueError, match="grid_thw"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 4]), grid_thw=two_columns)
        sliced = torch.tensor([[1, 2, 2], [1, 4, 4]])[:, :2]  # stride (3, 1), shape [2, 2]
        with pytest.raises(ValueError, match="grid_thw"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 4]), grid_thw=sliced)
        with pytest.raises(TypeError, match="cu_seqlens"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0.0, 4.0]))
        with pytest.raises(TypeError, match="position_ids"):
            meter.on_microbatch(position_ids=torch.tensor([False, True]))
        with pytest.raises(ValueError, match="samples"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 4]), samples=-1)
        with pytest.raises(ValueError, match="samples"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 4]), samples=2**63)
        with pytest.raises(ValueError, match="loss_sum"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 4]), loss_sum=math.nan, label_tokens=1)
        with pytest.raises(ValueError, match="together"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 4]), loss_sum=1.0)
        with pytest.raises(TypeError, match="samples"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 4]), samples=True)
        assert meter.health["bad_microbatches"] == 4  # refused before counting: not the library's to count


def test_peak_gpu_auto_reads_the_device_name_through_torch(monkeypatch):
    import torch

    batch = dict(cu_seqlens=[0, 64], samples=1)  # 64 x ~1e10 FLOPs: below the peak over the 20 ms slept
    # No CUDA device here: "auto" finds none, and MFU is not reported (the library warns once).
    with flopmeter.Meter(model="qwen3_vl_2b", peak={"gpu": "auto"}, sinks=QUIET) as meter:
        meter.on_microbatch(**batch)
        meter.on_log(1)
        record = meter.flush()
    assert "perf/mfu" not in record and record["perf/tflops_per_second"] > 0
    # A trainer on an H100: the name torch reports selects the H100 SXM row (989.4 dense bf16 TFLOP/s).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    with flopmeter.Meter(model="qwen3_vl_2b", peak={"gpu": "auto"}, sinks=QUIET) as meter:
        meter.on_microbatch(**batch)
        time.sleep(0.02)
        meter.on_log(1)
        record = meter.flush()
    assert record["perf/mfu"] == pytest.approx(record["perf/tflops_per_second"] / 989.4 * 100, rel=1e-12)


def test_the_librarys_warnings_are_records_of_the_flopmeter_logger(caplog):
    # A refused micro-batch (label tokens beyond its real tokens) is warned about by the library, rate-limited:
    # the warning reaches Python's logging, not raw stderr.
    with caplog.at_level(logging.WARNING, logger="flopmeter"):
        with flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1.0}, sinks=QUIET) as meter:
            with pytest.raises(ValueError):
                meter.on_microbatch(cu_seqlens=[0, 10], loss_sum=1.0, label_tokens=1000)
    records = [r for r in caplog.records if r.name == "flopmeter" and r.levelno == logging.WARNING]
    assert any("1000" in r.getMessage() for r in records), [r.getMessage() for r in caplog.records]


def test_small_allreduce_is_read_from_the_configurations_logging_table(tmp_path):
    from flopmeter.meter import _configured_small_allreduce

    # The keyword tables first, then a dict config's, then a plugin TOML file's; "automatic" when none says.
    assert _configured_small_allreduce(None, {}) == "automatic"
    assert _configured_small_allreduce(None, {"logging": {"small_allreduce": "log_depth"}}) == "log_depth"
    assert _configured_small_allreduce({"logging": {"small_allreduce": "backend"}}, {"logging": {"topk": 2}}) == "backend"
    plugin = tmp_path / "plugin.toml"
    plugin.write_text('[model]\nconfig = "tiny_vlm"\n[logging]\nsmall_allreduce = "log_depth"\n')
    if sys.version_info >= (3, 11):
        assert _configured_small_allreduce(str(plugin), {}) == "log_depth"
    # A value that names nothing is the library's to refuse, at its key.
    with pytest.raises(flopmeter.ConfigError, match=r"key 'logging.small_allreduce': unknown small_allreduce 'ring' "
                                                    r"\(expected \"automatic\", \"backend\" or \"log_depth\"\)"):
        flopmeter.Meter(model="tiny_vlm", logging={"small_allreduce": "ring"}, sinks={"console": False})


def test_an_unknown_small_allreduce_is_refused_naming_the_argument():
    # Checked before any group is made: the three choices are the C++ small_allreduce's.
    with pytest.raises(ValueError, match="small_allreduce must be one of 'automatic', 'backend', "
                                         "'log_depth', got 'tree'"):
        flopmeter.Meter(model="tiny_vlm", small_allreduce="tree")
    # A single process has no group: any valid choice runs nothing over one.
    with flopmeter.Meter(model="tiny_vlm", small_allreduce="log_depth", sinks={"console": False}) as meter:
        assert meter._collective.algorithm == "backend"


def test_records_are_the_jsonl_lines_keys_values_types_and_order(tmp_path):
    # The record crosses from the library as numbers (flopmeter/c_api_values.h); the JSONL sink writes the same
    # record as JSON. Parsed, each line must be the dict on_log / flush returned: same keys in the same order,
    # same values, and the same Python types (an integral number is an int in both, as json.loads makes it).
    # The second log adds train/lr and train/grad_norm: names the first record did not have.
    path = tmp_path / "m.jsonl"
    records = []
    with flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1.0},
                         sinks={"console": False, "jsonl": str(path)}) as meter:
        for step in range(1, 4):
            meter.on_microbatch(cu_seqlens=[0, 4, 9], samples=2)
            extra = {"learning_rate": 1e-4, "grad_norm": 0.5} if step >= 2 else {}
            record = meter.on_log(step, **extra)
            if record is not None:
                records.append(record)
        records.append(meter.flush())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == len(lines) == 3
    assert "train/lr" not in records[0] and records[1]["train/lr"] == 1e-4
    for record, line in zip(records, lines):
        assert list(record) == list(line)
        assert record == line
        assert [type(v) for v in record.values()] == [type(v) for v in line.values()]
    assert isinstance(records[0]["train/tokens_seen"], int) and records[0]["train/tokens_seen"] == 9


@pytest.mark.parametrize("value, expected", [
    # The JSON writer's rules (plugin/output/json_writer.h), read back as json.loads reads them: integral below
    # 1e21 in magnitude is written without a fraction (an int), -0 as 0, NaN and infinities as null.
    (3.0, 3), (-0.0, 0), (2.0**60, 2**60), (0.25, 0.25), (1e21, 1e21), (-1e22, -1e22), (float("nan"), None),
    (float("inf"), None), (float("-inf"), None),
])
def test_a_records_number_is_what_json_loads_gives_for_its_json_text(value, expected):
    from flopmeter import _values

    got = _values.json_number(value)
    assert type(got) is type(expected) and (got == expected or got is expected)


def test_a_log_crosses_from_the_library_into_python_at_most_three_times(monkeypatch, caplog):
    # Every call the library makes into Python is one of these (the collective's callbacks, the record callback,
    # the log callback); each is counted, per on_log and flush. A log waits for the previous log's collective,
    # hands its record and starts its own: 3 crossings, whether its collective is an ordinary log's SUM and MAX
    # (one request) or the per-rank table's all-gather (every third log here). The first log only starts; the
    # flush only waits and hands the last record.
    from flopmeter import _distributed, _native, _values

    calls = []
    kinds = []

    def counted(name, original):
        def wrapper(self, *args):
            calls.append(name)
            return original(self, *args)
        return wrapper

    for cls, name in ((_distributed.TorchCollective, "_start_collective"),
                      (_distributed.TorchCollective, "_start_allreduce"),
                      (_distributed.TorchCollective, "_wait_for"),
                      (_distributed.TorchCollective, "_release_handle"),
                      (_values.RecordReader, "_deliver")):
        monkeypatch.setattr(cls, name, counted(name, getattr(cls, name)))
    original_start = _distributed.TorchCollective._start_collective

    def start(self, user, request):
        kinds.append(request.contents.kind)
        return original_start(self, user, request)

    monkeypatch.setattr(_distributed.TorchCollective, "_start_collective", start)
    caplog.set_level(logging.DEBUG, logger="flopmeter")  # the log callback's crossings: each is a record here
    per_call = []
    with flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1.0}, sinks=QUIET,
                         logging={"topk_interval_logs": 3}) as meter:
        for step in range(1, 8):
            meter.on_microbatch(cu_seqlens=[0, 4, 9], samples=2)
            calls.clear()
            assert (meter.on_log(step) is None) == (step == 1)
            per_call.append(list(calls))
        calls.clear()
        assert meter.flush() is not None
        per_call.append(list(calls))
    assert per_call[0] == ["_start_collective"]
    for crossings in per_call[1:-1]:
        assert sorted(crossings) == ["_deliver", "_start_collective", "_wait_for"], per_call
    assert sorted(per_call[-1]) == ["_deliver", "_wait_for"]
    assert not caplog.records  # no message crossed either
    # Both kinds of request came, each as one call: the table at some logs, the SUM and MAX at the others.
    assert set(kinds) == {_native.COLLECTIVE_SUM_MAX, _native.COLLECTIVE_ALLGATHER}, kinds
