"""flopmeter.watch on PyPI's torch 2.x, where torch has the hooks it needs (keyword forward pre-hooks, optimizer
step hooks, the backward's graph task id): a hand loop over a tiny Hugging Face model with gradient checkpointing,
an Accelerate loop with gradient accumulation, padding-free and Unsloth-style batches, and the Weights & Biases
step in offline mode.

The expected FLOPs are flopmeter.FlopModel of the model's own config applied to the documents each test fed,
written out by hand; never a figure of the code under test.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch

import flopmeter
import tiny

OPTIONS = dict(peak={"tflops_per_gpu": 1000.0}, sinks={"console": False})


def padded(lengths: List[int], seed: int = 0) -> Dict[str, torch.Tensor]:
    """Right-padded rows of the given real lengths (the longest sets the width), labels on the real tokens."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(3, 60, (len(lengths), width), generator=g)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    ids[mask == 0] = tiny.PAD
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def flops(model: flopmeter.FlopModel, lengths: List[int]) -> int:
    width = max(lengths)
    return model.flops(document_lengths=lengths, padding_tokens=len(lengths) * width - sum(lengths))


def test_hand_loop_with_checkpointing_accumulation_evaluation_and_generation():
    model = tiny.qwen3()
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:  # transformers 5.x; gradient_checkpointing_enable before
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    records: List[Dict[str, Any]] = []
    meter = flopmeter.watch(model, optimizer, on_record=records.append, **OPTIONS)
    reference = flopmeter.FlopModel(model.config.to_dict())
    steps = [[[5, 9], [7]], [[3, 3, 12]], [[4], [8, 2], [6]]]
    expected = []
    for s, step in enumerate(steps):
        for m, lengths in enumerate(step):
            model(**padded(lengths, seed=10 * s + m)).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(sum(flops(reference, lengths) for lengths in step))
        model.eval()
        with torch.no_grad():
            model(**padded([6, 4], seed=99))
        model.generate(input_ids=torch.tensor([[5, 6, 7]]), max_new_tokens=3, do_sample=False,
                       pad_token_id=tiny.PAD)
        model.train()
    meter.close()
    assert [r["step"] for r in records] == [1, 2, 3]
    for i, record in enumerate(records):
        assert record["train/flops_seen"] == sum(expected[: i + 1])
        assert record["train/microbatches_per_step"] == len(steps[i])
        # Checkpointing was learned from the model: the recomputed forward is in the hardware figure only.
        assert record["perf/tflops_per_second_hardware"] > record["perf/tflops_per_second"]
    # close() removed torch's own hooks.
    assert not model._forward_pre_hooks
    assert not optimizer._optimizer_step_pre_hooks and not optimizer._optimizer_step_post_hooks


def test_accelerate_loop_counts_the_accumulation_at_the_step_that_runs():
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    # Accelerate keeps its state per process: a Trainer of an earlier test set it up without accumulation.
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    accelerator = Accelerator(gradient_accumulation_steps=2, cpu=True)
    model, optimizer = accelerator.prepare(tiny.qwen3(), torch.optim.SGD(tiny.qwen3().parameters(), lr=0.0))
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=1e-3))
    records: List[Dict[str, Any]] = []
    meter = flopmeter.watch(model, optimizer, on_record=records.append, **OPTIONS)
    reference = flopmeter.FlopModel(model.config.to_dict())
    micro = [[4, 6], [9], [3, 3], [7, 1], [5], [2, 8]]
    for i, lengths in enumerate(micro):
        with accelerator.accumulate(model):
            accelerator.backward(model(**padded(lengths, seed=i)).loss)
            optimizer.step()  # AcceleratedOptimizer: steps the inner optimizer every 2nd micro-batch only
            optimizer.zero_grad()
    meter.close()
    assert [r["step"] for r in records] == [1, 2, 3]
    assert [r["train/microbatches_per_step"] for r in records] == [2, 2, 2]
    assert records[-1]["train/flops_seen"] == sum(flops(reference, lengths) for lengths in micro)


def test_padding_free_and_unsloth_batches_are_read_from_the_forwards_arguments():
    from transformers import DataCollatorWithFlattening

    model = tiny.qwen3()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    meter = flopmeter.watch(model, optimizer, **OPTIONS)
    reference = flopmeter.FlopModel(model.config.to_dict())
    rows = tiny.text_rows(3, seed=4)
    flat = DataCollatorWithFlattening(return_flash_attn_kwargs=True)(rows)  # position_ids and cu_seq_lens_q
    model(**{k: v for k, v in flat.items() if k in ("input_ids", "position_ids", "labels", "cu_seq_lens_q",
                                                     "cu_seq_lens_k", "max_length_q", "max_length_k")}).loss.backward()
    # Unsloth's padding-free batch: the documents' lengths as packed_seq_lengths beside one flattened row.
    model(input_ids=torch.randint(3, 60, (1, 12)), packed_seq_lengths=torch.tensor([5, 7], dtype=torch.int32)
          ).logits.sum().backward()
    optimizer.step()
    lengths = [len(r["input_ids"]) for r in rows]
    assert meter.close()["train/flops_seen"] == reference.flops(document_lengths=lengths) + \
        reference.flops(document_lengths=[5, 7])


def _wandb_records(path: Path) -> List[Any]:
    """The protobuf records of a W&B transaction log (.wandb): a LevelDB-style log of 32 KiB blocks after a
    7-byte file header, each chunk a 7-byte header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, pending, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:  # zero padding to the end of the block
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        else:
            out.append(pending + chunk)
    records = []
    for raw in out:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        records.append(record)
    return records


def test_wandb_offline_records_land_on_their_own_flopmeter_step(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_DISABLED", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(mode="offline", dir=str(tmp_path), project="flopmeter-watch-test")
    model = tiny.qwen3()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    records: List[Dict[str, Any]] = []
    meter = flopmeter.watch(model, optimizer, on_record=records.append, **OPTIONS)
    for step in range(1, 6):
        loss = model(**padded([3 + step, 5], seed=step)).loss
        loss.backward()
        optimizer.step()  # the record of step - 1 is logged here, one log late
        optimizer.zero_grad()
        if step % 2 == 0:  # the loop's own logs, at its own steps, every other step
            wandb.log({"user/loss": loss.item()}, step=step)
    meter.close()
    run.finish()
    [log] = list(tmp_path.rglob("*.wandb"))
    for _ in range(300):  # W&B's service may still be writing the log when finish() returns: up to its exit record
        records_in_log = _wandb_records(log)
        if any(r.WhichOneof("record_type") == "exit" for r in records_in_log):
            break
        time.sleep(0.1)
    history, metrics = [], {}
    for record in records_in_log:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({(item.key or "/".join(item.nested_key)): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind == "metric" and record.metric.name:
            metrics[record.metric.name] = record.metric.step_metric
    assert metrics.get("train/flops_seen") == "flopmeter/step" and metrics.get("perf/goodput") == "flopmeter/step"
    rows = [row for row in history if "flopmeter/step" in row]
    # Every record is in a row of its own, carrying its own step and figures.
    assert [row["flopmeter/step"] for row in rows] == [r["step"] for r in records] == [1, 2, 3, 4, 5]
    for row, record in zip(rows, records):
        assert row["train/flops_seen"] == record["train/flops_seen"]
    # The loop's own logs were all taken (none refused as an earlier step).
    assert sorted(row["_step"] for row in history if "user/loss" in row) == [2, 4]
