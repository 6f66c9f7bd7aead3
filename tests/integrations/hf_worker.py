"""One rank of a 2-process TRL SFTTrainer run (padding_free, Gloo on CPU) metered by attach; writes what its
collator fed and the Trainer's log history to OUT/rank{RANK}.json. Run under torchrun by test_transformers.py."""

import json
import os
import sys
from pathlib import Path

import tiny
from datasets import Dataset
from trl import SFTConfig, SFTTrainer

from flopmeter.integrations.transformers import attach

out = Path(sys.argv[1])
rank = int(os.environ["RANK"])
args = SFTConfig(output_dir=str(out / "trainer"), per_device_train_batch_size=3, padding_free=True,
                 pad_to_multiple_of=8, max_length=None, logging_steps=1, report_to=[], use_cpu=True,
                 save_strategy="no", disable_tqdm=True, num_train_epochs=1, seed=0, ddp_backend="gloo")
model = tiny.qwen3()
trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(tiny.text_rows(12, seed=5)),
                     processing_class=tiny.tokenizer())
recorder = tiny.Recorder(trainer.data_collator)
trainer.data_collator = recorder
meter = attach(trainer, peak={"tflops_per_gpu": 1.0})
trainer.train()
(out / f"rank{rank}.json").write_text(json.dumps({
    "batches": recorder.batches, "log_history": trainer.state.log_history, "total_flos": trainer.state.total_flos,
    "config": model.config.to_dict(), "health": meter.health}, default=str))
