"""flopmeter.watch(model, optimizer) in a plain torch loop, on the torch this suite runs (Debian's 1.13, which has
neither keyword forward pre-hooks nor optimizer step hooks: watch wraps the methods; the torch 2.x hooks are
tested in tests/integrations/test_watch_torch2.py).

The expected FLOPs are the shipped tiny_vlm's FlopModel applied to the micro-batches the loop fed, their
documents and padding written out by hand; never a figure of the code under test.
"""

from __future__ import annotations

import logging
import time

import pytest

torch = pytest.importorskip("torch")

import flopmeter  # noqa: E402

MODEL = "tiny_vlm"
OPTIONS = dict(model=MODEL, peak={"tflops_per_gpu": 1000.0}, sinks={"console": False})


class TinyLM(torch.nn.Module):
    """A causal LM's forward signature (what a Hugging Face model takes) around two small layers: its FLOPs do
    not matter, the FLOP model is tiny_vlm's."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(64, 8)
        self.head = torch.nn.Linear(8, 64)

    def forward(self, input_ids, attention_mask=None, position_ids=None, labels=None):
        return {"loss": self.head(self.embed(input_ids)).float().pow(2).mean()}


def padded(lengths, width):
    """A right-padded batch: one row per length, `width` slots each."""
    ids = torch.randint(1, 64, (len(lengths), width))
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    return {"input_ids": ids, "attention_mask": mask}


def flops_of(lengths, width):
    """The FLOPs of a padded batch: each row one document of its real tokens; the rest of the slots padding."""
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return flopmeter.FlopModel(MODEL).flops(cu_seqlens=cu, padding_tokens=len(lengths) * width - cu[-1])


def train_step(model, optimizer, batches):
    for batch in batches:
        model(**batch)["loss"].backward()
    optimizer.step()
    optimizer.zero_grad()


def test_plain_loop_counts_training_microbatches_and_the_accumulation_only():
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    records = []
    meter = flopmeter.watch(model, optimizer, on_record=records.append, **OPTIONS)
    # Three steps of 3, 2 and 3 micro-batches (the accumulation is counted, never configured).
    steps = [[([3, 5], 6), ([4], 4), ([1, 2, 2], 3)], [([6, 6], 6), ([2], 5)], [([5], 8), ([3, 3], 4), ([7], 7)]]
    expected, tokens = [], []
    for step in steps:
        train_step(model, optimizer, [padded(lengths, width) for lengths, width in step])
        expected.append(sum(flops_of(lengths, width) for lengths, width in step))
        tokens.append(sum(sum(lengths) for lengths, _ in step))
        # Between steps: evaluation, a generation loop in training mode without gradients, and a forward with
        # gradients of a model in eval mode: none of them is a training micro-batch.
        model.eval()
        with torch.no_grad():
            model(**padded([4], 4))
        model.train()
        with torch.no_grad():
            ids = torch.randint(1, 64, (1, 2))
            for _ in range(3):
                model(input_ids=ids)
                ids = torch.cat([ids, ids[:, -1:]], dim=1)
        model.eval()
        model(**padded([5], 5))["loss"].backward()
        model.train()
        optimizer.zero_grad()
    last = meter.close()
    # log_every=1: the records of steps 1 and 2 came at the logs of steps 2 and 3; close() flushed step 3's.
    assert [r["step"] for r in records] == [1, 2, 3] and last is records[-1]
    for i, record in enumerate(records):
        assert record["train/flops_seen"] == sum(expected[: i + 1])
        assert record["train/tokens_seen"] == sum(tokens[: i + 1])
        assert record["train/optimizer_steps"] == 1
        assert record["train/microbatches_per_step"] == len(steps[i])


def test_positional_arguments_are_read_by_the_forwards_parameter_names():
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    meter = flopmeter.watch(model, optimizer, **OPTIONS)
    batch = padded([2, 4], 4)
    model(batch["input_ids"], batch["attention_mask"])["loss"].backward()
    optimizer.step()
    assert meter.close()["train/flops_seen"] == flops_of([2, 4], 4)


def test_recomputed_forward_of_a_checkpointed_model_is_not_a_microbatch():
    # checkpoint(model, ...) without reentrance runs the model's forward again inside the backward, with
    # gradients enabled and the model in training mode: that second forward is recomputation, not data.
    from torch.utils.checkpoint import checkpoint

    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    meter = flopmeter.watch(model, optimizer, **OPTIONS)
    calls = []
    model.register_forward_pre_hook(lambda m, args: calls.append(1))
    batch = padded([3, 4], 4)
    checkpoint(model, batch["input_ids"], batch["attention_mask"], use_reentrant=False)["loss"].backward()
    optimizer.step()
    assert len(calls) == 2  # the forward ran twice
    assert meter.close()["train/flops_seen"] == flops_of([3, 4], 4)


def test_log_every_and_the_callers_own_logs():
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    records = []
    meter = flopmeter.watch(model, optimizer, log_every=2, on_record=records.append, **OPTIONS)
    for _ in range(4):
        train_step(model, optimizer, [padded([3], 3)] * 2)
    meter.close()
    # Logs at steps 2 and 4; each interval holds 2 steps of 2 micro-batches.
    assert [r["step"] for r in records] == [2, 4]
    assert [r["train/optimizer_steps"] for r in records] == [2, 2]
    assert records[-1]["train/flops_seen"] == 8 * flops_of([3], 3)

    model, records = TinyLM(), []
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    meter = flopmeter.watch(model, optimizer, log_every=None, on_record=records.append, **OPTIONS)
    for _ in range(3):
        train_step(model, optimizer, [padded([2], 2)])
    assert records == []  # nothing logs by itself
    meter.on_log(3)
    meter.close()
    assert [(r["step"], r["train/optimizer_steps"]) for r in records] == [(3, 3)]


def test_goodput_splits_the_wall_time_into_steps_and_the_time_between():
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    records = []
    meter = flopmeter.watch(model, optimizer, log_every=2, on_record=records.append, **OPTIONS)
    pause = 0.05
    for _ in range(4):
        time.sleep(pause)  # the data wait, evaluation or checkpoint between steps
        train_step(model, optimizer, [padded([3], 3)])
    meter.close()
    for record in records:
        wall, inside, between = record["perf/wall_time"], record["perf/in_step_time"], \
            record["perf/between_steps_time"]
        assert between >= 2 * pause  # two pauses in each interval of two steps
        assert inside + between == pytest.approx(wall, rel=1e-12)
        assert record["perf/goodput"] == pytest.approx(inside / wall, rel=1e-12) and record["perf/goodput"] < 1
        assert 0 < record["perf/step_fwd_bwd_time"] <= inside
        assert record["perf/mfu_step_time"] == pytest.approx(record["perf/mfu"] / record["perf/goodput"], rel=1e-12)


def test_close_removes_every_hook_and_a_second_watch_is_refused_until_then():
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    forward, step = model.forward, optimizer.step
    meter = flopmeter.watch(model, optimizer, **OPTIONS)
    with pytest.raises(RuntimeError, match="watched already"):
        flopmeter.watch(model, optimizer, **OPTIONS)
    meter.close()
    # The instances' own attributes are gone: forward and step are the classes' again.
    assert "forward" not in vars(model) and "step" not in vars(optimizer)
    assert model.forward.__func__ is forward.__func__ and optimizer.step.__func__ is step.__func__
    assert not model._forward_pre_hooks and not model._forward_hooks
    again = flopmeter.watch(model, optimizer, **OPTIONS)
    train_step(model, optimizer, [padded([2], 2)])
    assert again.close()["train/flops_seen"] == flops_of([2], 2)


def test_a_scheduler_made_after_watch_keeps_working_after_close():
    # torch's LR scheduler wraps optimizer.step on the instance; close() cannot take watch's wrapper out from
    # under it, so the wrapper is switched off and calls straight through.
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    meter = flopmeter.watch(model, optimizer, **OPTIONS)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    train_step(model, optimizer, [padded([2], 2)])
    scheduler.step()
    meter.close()
    train_step(model, optimizer, [padded([2], 2)])
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.025)
    assert meter.health.get("bad_microbatches", 0) == 0


def test_a_failing_hook_warns_once_and_never_breaks_the_step(caplog):
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    calls = []

    def describe(args, kwargs):  # fails on every other micro-batch
        calls.append(1)
        if len(calls) % 2:
            raise KeyError("no such key")
        return {"cu_seqlens": [0, 2]}

    def on_record(record):
        raise RuntimeError("logger down")

    meter = flopmeter.watch(model, optimizer, describe=describe, on_record=on_record, **OPTIONS)
    with caplog.at_level(logging.WARNING, logger="flopmeter"):
        for _ in range(3):
            train_step(model, optimizer, [padded([2], 2)] * 2)
        meter.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "flopmeter"]
    assert sum("counting a micro-batch failed" in w for w in warnings) == 1
    assert sum("on_record failed" in w for w in warnings) == 1
    assert len(calls) == 6  # every training forward ran (and stepped) whatever its hook did


def test_bad_arguments_are_named():
    model = TinyLM()
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        flopmeter.watch(object(), **OPTIONS)
    with pytest.raises(ValueError, match="log_every"):
        flopmeter.watch(model, log_every=0, **OPTIONS)
    with pytest.raises(TypeError, match="optimizer must have a step"):
        flopmeter.watch(model, object(), **OPTIONS)
    with pytest.raises(ValueError, match="pipeline-parallel"):
        flopmeter.watch(model, parallel={"pp": 2}, **OPTIONS)
    with pytest.raises(TypeError, match="watch: the model .* has no Hugging Face config"):
        flopmeter.watch(model, peak={"tflops_per_gpu": 1.0})
    assert "forward" not in vars(model)  # nothing was installed by a refused watch
