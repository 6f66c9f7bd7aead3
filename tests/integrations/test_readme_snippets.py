"""README.md's one-line snippets for the Hugging Face Trainer and Lightning run as written."""

from __future__ import annotations

import os
import re

import pytorch_lightning
import torch

import lightning_job
import tiny
from conftest import REPO


def snippets():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### In a trainer: one line"):readme.index("## Using it from a trainer")]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def test_the_hugging_face_snippet(tmp_path):
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    code = snippets()[0]
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, logging_steps=1,
                             num_train_epochs=1,
                             report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=tiny.qwen3(), args=args, train_dataset=Dataset.from_list(tiny.text_rows(8)),
                      data_collator=DataCollatorForLanguageModeling(tiny.tokenizer(), mlm=False))
    exec(compile(code, "README.md", "exec"), {"trainer": trainer})
    last = trainer.state.log_history[-1]
    assert last["train/tokens_seen"] == sum(len(r["input_ids"]) for r in tiny.text_rows(8))
    assert last["flopmeter/step"] == 2 and "perf/tflops_per_second" in last


def test_the_lightning_snippet(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default logger writes lightning_logs/ here
    code = snippets()[1]
    rows = tiny.text_rows(16)
    loader = torch.utils.data.DataLoader(rows, batch_size=4, collate_fn=lightning_job.collate)
    namespace = {"pytorch_lightning": pytorch_lightning, "module": lightning_job.Module(), "loader": loader}
    exec(compile(code, "README.md", "exec"), namespace)
    metrics = namespace["trainer"].logged_metrics
    # 4 optimizer steps: the records of steps 1 to 3 were logged (the last one goes to the loggers at the end).
    assert int(metrics["flopmeter/step"]) == 3
    assert int(metrics["train/tokens_seen"]) == sum(len(r["input_ids"]) for r in rows[:12])
    assert os.path.isdir(tmp_path / "lightning_logs")


def test_the_watch_snippet():
    import flopmeter

    code = snippets()[2]
    model = tiny.qwen3()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    namespace = {"model": model, "optimizer": optimizer}
    exec(compile(code, "README.md", "exec"), namespace)
    rows = tiny.text_rows(4)
    for row in rows:
        ids = torch.tensor([row["input_ids"]])
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    last = namespace["meter"].close()
    assert last["train/tokens_seen"] == sum(len(r["input_ids"]) for r in rows)
    assert last["train/flops_seen"] == sum(flopmeter.FlopModel(model.config.to_dict()).flops(
        document_lengths=[len(r["input_ids"])]) for r in rows)
