"""A tiny Qwen3 trained by pytorch-lightning with FlopmeterCallback; run in-process by test_lightning.py (one
process) or under torchrun (DDP over Gloo). Writes what each batch fed and the metrics the loggers received to
OUT/rank{RANK}.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers.logger import Logger

import tiny
from flopmeter.integrations.lightning import FlopmeterCallback


class Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = tiny.qwen3()
        self.config = self.model.config

    def training_step(self, batch: Dict[str, Any], batch_idx: int) -> Any:
        return self.model(**batch).loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Capture(Logger):
    """Keeps what the trainer logs, step by step."""

    def __init__(self) -> None:
        super().__init__()
        self.metrics: List[Dict[str, Any]] = []

    @property
    def name(self) -> str:
        return "capture"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: Dict[str, float], step: int = None) -> None:
        self.metrics.append(dict(metrics, logger_step=step))


def collate(features: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Right-padded rows with their attention mask; labels -100 on the padding."""
    length = max(len(f["input_ids"]) for f in features)
    ids = torch.full((len(features), length), tiny.PAD, dtype=torch.int64)
    for i, f in enumerate(features):
        ids[i, :len(f["input_ids"])] = torch.tensor(f["input_ids"])
    mask = (torch.arange(length)[None, :] < torch.tensor([len(f["input_ids"]) for f in features])[:, None]).long()
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def run(out: Path, devices: int) -> None:
    rows = tiny.text_rows(12, seed=7)
    recorder = tiny.Recorder(collate)
    loader = torch.utils.data.DataLoader(rows, batch_size=3, collate_fn=recorder, shuffle=False)
    capture = Capture()
    callback = FlopmeterCallback(peak={"tflops_per_gpu": 1.0})
    trainer = pl.Trainer(accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
                         max_epochs=1, logger=capture, callbacks=[callback], log_every_n_steps=1,
                         accumulate_grad_batches=2, enable_progress_bar=False, enable_checkpointing=False,
                         enable_model_summary=False, use_distributed_sampler=devices > 1)
    module = Module()
    trainer.fit(module, loader)
    rank = trainer.global_rank
    (out / f"rank{rank}.json").write_text(json.dumps({
        "batches": recorder.batches, "metrics": capture.metrics, "health": callback.meter.health,
        "config": module.config.to_dict()}, default=str))


if __name__ == "__main__":
    run(Path(sys.argv[1]), int(sys.argv[2]))
