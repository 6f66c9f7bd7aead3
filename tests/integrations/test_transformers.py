"""flopmeter.integrations.transformers.attach on the real transformers Trainer and TRL SFTTrainer (CPU, tiny
models built from configs). Expected values are derived from what each batch fed: the recorder in tiny.py keeps
the token lengths of the features the collator was given (the documents) and the batch's slots."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch

import flopmeter
import tiny
from conftest import HERE, read_json, run_torchrun
from flopmeter.integrations.transformers import attach

PEAK = {"tflops_per_gpu": 1.0}  # no GPU here: a peak of our own, so that perf/mfu is in the records


def common_args(tmp_path: Path, **kwargs: Any) -> Dict[str, Any]:
    return dict(output_dir=str(tmp_path / "out"), logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
                disable_tqdm=True, num_train_epochs=1, seed=0, **kwargs)


expected_flops = tiny.expected_flops


def flopmeter_entries(trainer) -> List[Dict[str, Any]]:
    return [e for e in trainer.state.log_history if "flopmeter/step" in e]


def test_trainer_with_gradient_accumulation_bills_each_optimizer_step_and_the_short_last_one(tmp_path):
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    tok = tiny.tokenizer()
    model = tiny.qwen3()
    recorder = tiny.Recorder(DataCollatorForLanguageModeling(tok, mlm=False))
    # 10 rows, 2 per micro-batch, 2 micro-batches per optimizer step: steps of 2, 2 and 1 micro-batches.
    args = TrainingArguments(**common_args(tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2))
    trainer = Trainer(model=model, args=args, train_dataset=Dataset.from_list(tiny.text_rows(10, seed=1)),
                      data_collator=recorder)
    meter = attach(trainer, peak=PEAK)
    trainer.train()
    batches = recorder.batches
    assert len(batches) == 5
    entries = flopmeter_entries(trainer)
    # One interval per optimizer step; the record of step k reaches the log of step k + 1, the last the final log.
    assert [e["flopmeter/step"] for e in entries] == [1, 2, 3]
    assert [e["step"] for e in entries] == [2, 3, 3]
    assert "train_runtime" in entries[-1]
    # The running totals after each optimizer step: micro-batches {0, 1}, {2, 3}, {4}.
    real = [sum(b["documents"]) for b in batches]
    rows = [len(b["documents"]) for b in batches]
    assert [e["train/tokens_seen"] for e in entries] == [real[0] + real[1], sum(real[:4]), sum(real)]
    assert [e["train/num_samples"] for e in entries] == [rows[0] + rows[1], sum(rows[:4]), sum(rows)]
    # The short last step: its own batch only, real over slots.
    assert entries[-1]["train/batch_efficiency"] == pytest.approx(real[4] / batches[4]["slots"])
    # The Trainer's own names stay as they are.
    assert all("loss" in e for e in entries[:-1]) and "train_loss" in entries[-1]
    # floating_point_ops: the exact FLOPs of each micro-batch (total_flos is their sum; exact below 2^53).
    flops = expected_flops(flopmeter.FlopModel(model.config.to_dict()), batches)
    assert trainer.state.total_flos == sum(flops)
    # train/flops_seen: the same FLOPs as running totals after each optimizer step ({0, 1}, {2, 3}, {4}).
    assert [e["train/flops_seen"] for e in entries] == [flops[0] + flops[1], sum(flops[:4]), sum(flops)]
    assert 6 * model.num_parameters(exclude_embeddings=True) * sum(b["slots"] for b in batches) != sum(flops)
    # The Meter was told the micro-batches per optimizer step (perf/optimizer_step_time = step_time * 2).
    assert entries[0]["perf/optimizer_step_time"] == pytest.approx(2 * entries[0]["perf/step_time"])
    assert entries[0]["perf/mfu"] > 0 and entries[0]["perf/fwd_bwd_time"] > 0 and "perf/data_time" in entries[0]
    assert meter.health["bad_microbatches"] == 0
    # train/loss, per label token over each optimizer step, is the Trainer's own loss of that step (it divides
    # the summed token losses by the step's label tokens, num_items_in_batch); the label tokens are the targets
    # of the causal shift, labels[:, 1:] != -100.
    losses = {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e}
    for e in entries:
        assert e["train/loss"] == pytest.approx(losses[e["flopmeter/step"]], rel=1e-5)
    labels = sum(sum(n - 1 for n in b["documents"]) for b in batches)  # every real token but each row's first
    assert entries[-1]["train/assistant_tokens_seen"] == labels


@pytest.mark.parametrize("mode", ["padding_free", "packing"])
def test_sft_trainer_padding_free_and_packing(tmp_path, mode):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    tok = tiny.tokenizer()
    model = tiny.qwen3()
    extra = dict(padding_free=True, pad_to_multiple_of=16, max_length=None) if mode == "padding_free" else \
        dict(packing=True, max_length=64)
    args = SFTConfig(**common_args(tmp_path, per_device_train_batch_size=4, **extra))
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(tiny.text_rows(12, seed=2)),
                         processing_class=tok)
    recorder = tiny.Recorder(trainer.data_collator)
    trainer.data_collator = recorder
    meter = attach(trainer, peak=PEAK)
    trainer.train()
    batches = recorder.batches
    entries = flopmeter_entries(trainer)
    last = entries[-1]
    real = sum(sum(b["documents"]) for b in batches)
    slots = sum(b["slots"] for b in batches)
    assert last["train/tokens_seen"] == real
    assert last["train/num_samples"] == sum(len(b["documents"]) for b in batches)
    if mode == "padding_free":
        # pad_to_multiple_of=16 pads each flattened row: the tail is padding, not one-token documents.
        assert slots > real and all(b["slots"] % 16 == 0 for b in batches)
    else:
        assert slots == real
    flops = expected_flops(flopmeter.FlopModel(model.config.to_dict()), batches)
    assert trainer.state.total_flos == sum(flops)
    assert last["train/flops_seen"] == sum(flops)
    assert meter.health["bad_microbatches"] == 0


def test_qwen3_vl_with_a_frozen_vision_tower(tmp_path):
    from transformers import Trainer, TrainingArguments

    model = tiny.qwen3_vl()
    for name, parameter in model.named_parameters():
        if ".visual." in f".{name}" and "merger" not in name:
            parameter.requires_grad_(False)
    recorder = tiny.Recorder(tiny.vl_collate)
    args = TrainingArguments(**common_args(tmp_path, per_device_train_batch_size=2))
    trainer = Trainer(model=model, args=args, train_dataset=tiny.vl_rows(4, seed=3), data_collator=recorder)
    meter = attach(trainer, peak=PEAK)
    trainer.train()
    last = flopmeter_entries(trainer)[-1]
    assert (last["train/frozen_vision"], last["train/frozen_merger"], last["train/frozen_text"]) == (1, 0, 0)
    assert last["train/tokens_seen"] == sum(sum(b["documents"]) for b in recorder.batches)
    # floating_point_ops bills the images with the vision tower frozen: fewer FLOPs than full training.
    config = model.config.to_dict()
    frozen = sum(expected_flops(flopmeter.FlopModel(config, frozen="vision"), recorder.batches))
    assert trainer.state.total_flos == frozen
    assert last["train/flops_seen"] == frozen
    assert frozen < sum(expected_flops(flopmeter.FlopModel(config), recorder.batches))
    assert meter.model.coefficients["frozen"] == ["vision"]
    assert all("grids" in b for b in recorder.batches)


def test_lora_through_peft_is_billed_as_its_rank_and_targets(tmp_path):
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    tok = tiny.tokenizer()
    model = get_peft_model(tiny.qwen3(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                    task_type="CAUSAL_LM"))
    args = TrainingArguments(**common_args(tmp_path, per_device_train_batch_size=4))
    trainer = Trainer(model=model, args=args, train_dataset=Dataset.from_list(tiny.text_rows(8, seed=4)),
                      data_collator=DataCollatorForLanguageModeling(tok, mlm=False))
    recorder = tiny.Recorder(trainer.data_collator)
    trainer.data_collator = recorder
    meter = attach(trainer, peak=PEAK)
    trainer.train()
    last = flopmeter_entries(trainer)[-1]
    assert last["train/lora_rank"] == 4
    # Learned from the base model's config under the PEFT wrapper, billed as rank-4 adapters on q and v.
    assert (meter.model.coefficients["lora_rank"], meter.model.coefficients["lora_targets"]) == (4, ["q_proj", "v_proj"])
    lora = flopmeter.FlopModel(model.get_base_model().config.to_dict(), lora_rank=4, lora_targets=["q_proj", "v_proj"])
    assert trainer.state.total_flos == sum(expected_flops(lora, recorder.batches))
    assert last["train/flops_seen"] == sum(expected_flops(lora, recorder.batches))


def test_a_partly_frozen_decoder_is_named_in_one_warning(tmp_path, caplog):
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    model = tiny.qwen3()
    for parameter in model.model.layers[0].parameters():
        parameter.requires_grad_(False)
    args = TrainingArguments(**common_args(tmp_path, per_device_train_batch_size=4))
    trainer = Trainer(model=model, args=args, train_dataset=Dataset.from_list(tiny.text_rows(4)))
    with caplog.at_level(logging.WARNING, logger="flopmeter"):
        attach(trainer, peak=PEAK)
    warnings = [r.getMessage() for r in caplog.records if r.name == "flopmeter" and "regime" in r.getMessage()]
    assert len(warnings) == 1
    assert "model.layers.0.self_attn.q_proj.weight" in warnings[0] and "text part is partly frozen" in warnings[0]


def test_attach_twice_and_a_non_trainer_are_refused(tmp_path):
    with pytest.raises(TypeError, match="transformers.Trainer"):
        attach(object())


def test_two_processes_sum_the_data_parallel_group(tmp_path):
    out = tmp_path / "ranks"
    out.mkdir()
    run_torchrun(HERE / "hf_worker.py", [str(out)], 2, tmp_path)
    ranks = [read_json(out / f"rank{r}.json") for r in range(2)]
    real = sum(sum(b["documents"]) for r in ranks for b in r["batches"])
    samples = sum(len(b["documents"]) for r in ranks for b in r["batches"])
    last = [e for e in ranks[0]["log_history"] if "flopmeter/step" in e][-1]
    assert last["train/tokens_seen"] == real
    assert last["train/num_samples"] == samples
    # total_flos: the Trainer's float32 gather of each rank's exact sum.
    model = flopmeter.FlopModel(ranks[0]["config"])
    flops = sum(sum(expected_flops(model, r["batches"])) for r in ranks)
    assert math.isclose(ranks[0]["total_flos"], flops, rel_tol=1e-6)
    # train/flops_seen: the same DP sum, exact (no float32 in its way).
    assert last["train/flops_seen"] == flops


def test_activation_checkpointing_is_billed_as_recompute(tmp_path):
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    # transformers' default checkpoint is non-reentrant: each layer's forward runs again but for its last GEMM.
    args = TrainingArguments(**common_args(tmp_path, per_device_train_batch_size=4, activation_checkpointing=True))
    trainer = Trainer(model=tiny.qwen3(), args=args, train_dataset=Dataset.from_list(tiny.text_rows(8, seed=6)),
                      data_collator=DataCollatorForLanguageModeling(tiny.tokenizer(), mlm=False))
    meter = attach(trainer, peak=PEAK)
    trainer.train()
    assert meter.model.coefficients["recompute"]["settings"]["policy"] == "full_early_stop"
    last = flopmeter_entries(trainer)[-1]
    assert last["perf/hfu"] > last["perf/mfu"] > 0  # hardware FLOPs include the recomputed forwards
