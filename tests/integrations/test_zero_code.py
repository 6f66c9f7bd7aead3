"""The zero-code entries on the real Hugging Face Trainer: the callback LLaMA-Factory's run_exp(callbacks=[...])
and ms-swift's extra_callbacks take, and the Axolotl plugin's post_trainer_create, with an Axolotl-style
multipack batch (document ids in attention_mask). LLaMA-Factory, ms-swift and Axolotl themselves are not installed
here: each pins its own transformers and torch (LLaMA-Factory and ms-swift an older transformers than this
venv's 5.x; Axolotl a CUDA stack: bitsandbytes, flash-attn, liger), so they cannot share this venv. What they do
with the callback and the plugin (append it to Trainer(callbacks=...); call post_trainer_create(cfg, trainer)
after building the trainer) is done here by hand on the same Trainer class.

Expected FLOPs are the FlopModel of the model's config over the documents each batch fed, never the code under
test's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch

import flopmeter
import tiny

PEAK = {"tflops_per_gpu": 1.0}


def args_for(tmp_path: Path, **kwargs: Any):
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=str(tmp_path / "out"), logging_steps=1, report_to=[], use_cpu=True,
                             save_strategy="no", disable_tqdm=True, num_train_epochs=1, seed=0, **kwargs)


def entries(trainer) -> List[Dict[str, Any]]:
    return [e for e in trainer.state.log_history if "flopmeter/step" in e]


def test_trainer_callback_attaches_when_training_begins(tmp_path):
    # LLaMA-Factory: run_exp(callbacks=[FlopmeterTrainerCallback()]) hands the list to its Trainer subclass.
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, Trainer

    from flopmeter.integrations.hf_callback import FlopmeterTrainerCallback

    model = tiny.qwen3()
    recorder = tiny.Recorder(DataCollatorForLanguageModeling(tiny.tokenizer(), mlm=False))
    callback = FlopmeterTrainerCallback(peak=PEAK)
    trainer = Trainer(model=model, args=args_for(tmp_path, per_device_train_batch_size=2,
                                                 gradient_accumulation_steps=2),
                      train_dataset=Dataset.from_list(tiny.text_rows(8, seed=3)), data_collator=recorder,
                      callbacks=[callback])
    trainer.train()
    assert callback.meter is not None and trainer._flopmeter_attachment.meter is callback.meter
    flops = tiny.expected_flops(flopmeter.FlopModel(model.config.to_dict()), recorder.batches)
    found = entries(trainer)
    assert [e["flopmeter/step"] for e in found] == [1, 2]
    assert found[-1]["train/flops_seen"] == sum(flops)
    assert found[-1]["train/tokens_seen"] == sum(sum(b["documents"]) for b in recorder.batches)


def test_ms_swift_registration_appends_one_callback_with_options_from_the_environment(monkeypatch):
    from flopmeter.integrations import ms_swift
    from flopmeter.integrations.hf_callback import FlopmeterTrainerCallback

    monkeypatch.setenv("FLOPMETER_OPTIONS", '{"peak": {"gpu": "H100 SXM"}}')
    callbacks: List[Any] = []
    first = ms_swift.register(callbacks)
    assert ms_swift.register(callbacks) is first and len(callbacks) == 1  # once, whatever imports it twice
    assert isinstance(first, FlopmeterTrainerCallback) and first.options == {"peak": {"gpu": "H100 SXM"}}
    monkeypatch.setenv("FLOPMETER_OPTIONS", "[1, 2]")
    with pytest.raises(ValueError, match="FLOPMETER_OPTIONS must be a JSON object"):
        ms_swift.options_from_environment()
    monkeypatch.setenv("FLOPMETER_OPTIONS", "{peak")
    with pytest.raises(ValueError, match="FLOPMETER_OPTIONS"):
        ms_swift.options_from_environment()


def multipack_collate(features: List[Dict[str, Any]]) -> Dict[str, torch.Tensor]:
    """Axolotl's multipack, by hand: the features packed into one row of 64 slots, attention_mask holding each
    token's document id (1, 2, ...; 0 for padding), position_ids restarting per document."""
    width = 64
    ids = torch.full((1, width), tiny.PAD, dtype=torch.int64)
    mask = torch.zeros(1, width, dtype=torch.int64)
    positions = torch.zeros(1, width, dtype=torch.int64)
    at = 0
    for doc, f in enumerate(features, start=1):
        n = len(f["input_ids"])
        ids[0, at:at + n] = torch.tensor(f["input_ids"])
        mask[0, at:at + n] = doc
        positions[0, at:at + n] = torch.arange(n)
        at += n
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions, "labels": labels}


def test_axolotl_plugin_attaches_after_the_trainer_is_created_with_its_options(tmp_path):
    from datasets import Dataset
    from transformers import Trainer

    from flopmeter.integrations.axolotl import FlopmeterPlugin, plugin_options

    rows = tiny.text_rows(6, seed=5, low=4, high=20)  # 3 documents per packed row: at most 60 of 64 slots
    model = tiny.qwen3()
    fed: List[List[int]] = []  # the document lengths of each packed row, as the collator was given them

    def collate(features):
        fed.append([len(f["input_ids"]) for f in features])
        return multipack_collate(features)

    trainer = Trainer(model=model, args=args_for(tmp_path, per_device_train_batch_size=3),
                      train_dataset=Dataset.from_list(rows), data_collator=collate)
    plugin = FlopmeterPlugin()
    cfg = {"plugins": ["flopmeter.integrations.axolotl.FlopmeterPlugin"], "flopmeter": {"peak": PEAK}}
    plugin.pre_model_load(cfg)  # a hook Axolotl's plugin manager calls on every plugin: nothing to do
    plugin.post_trainer_create(cfg, trainer)
    trainer.train()
    assert plugin.meter is trainer._flopmeter_attachment.meter
    reference = flopmeter.FlopModel(model.config.to_dict())
    # Each packed row: its documents (told apart by the ids in attention_mask), the rest of the 64 slots padding.
    expected = sum(reference.flops(document_lengths=lengths, padding_tokens=64 - sum(lengths)) for lengths in fed)
    found = entries(trainer)
    assert len(fed) == 2 and found[-1]["train/num_samples"] == 6
    assert found[-1]["train/tokens_seen"] == sum(len(r["input_ids"]) for r in rows)
    assert found[-1]["train/flops_seen"] == expected
    with pytest.raises(TypeError, match="flopmeter: must be a mapping"):
        plugin_options({"flopmeter": [1, 2]})
