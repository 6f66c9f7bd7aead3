"""TRL's SFTTrainer with flopmeter: padding-free batches of a tiny Qwen3 built from a config, on the CPU, in
as many processes as torchrun starts (Gloo). The one flopmeter line is `attach(trainer)`; every log the
Trainer writes then carries flopmeter's figures (perf/tflops_per_second, perf/mfu, train/tokens_seen, ...).

    torchrun --nproc_per_node 2 examples/trl_sft/train.py --output-dir /tmp/trl_sft

Needs PyPI's torch 2.x, transformers, trl and datasets (`pip install flopmeter[transformers] trl datasets`).
Rank 0 prints the last log entry and writes the Trainer's log history to OUTPUT_DIR/log_history.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
from trl import SFTConfig, SFTTrainer

from flopmeter.integrations.transformers import attach

VOCAB = 256


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer ("t5" is id 5; pad 0, eos 1): the dataset below is already tokenized."""
    vocab = {"<pad>": 0, "<eos>": 1, **{f"t{i}": i for i in range(2, VOCAB)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="t2"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")


def documents(count: int, seed: int) -> Dataset:
    """Token rows of 8 to 96 tokens, ending in eos: documents of very different lengths, as SFT data is."""
    rng = random.Random(seed)
    rows = [{"input_ids": [rng.randrange(2, VOCAB) for _ in range(rng.randint(7, 95))] + [1]} for _ in range(count)]
    return Dataset.from_list(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="trl_sft_out")
    parser.add_argument("--rows", type=int, default=48)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
                         pad_token_id=0, eos_token_id=1, tie_word_embeddings=True)
    sft = SFTConfig(output_dir=args.output_dir, per_device_train_batch_size=4, padding_free=True,
                    pad_to_multiple_of=64, max_length=None, num_train_epochs=1, logging_steps=2,
                    learning_rate=1e-3, report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True,
                    ddp_backend="gloo", seed=0)
    trainer = SFTTrainer(model=Qwen3ForCausalLM(config), args=sft, train_dataset=documents(args.rows, seed=1),
                         processing_class=tiny_tokenizer())
    attach(trainer, peak={"tflops_per_gpu": 1.0})  # on a GPU leave peak out: gpu = "auto"
    trainer.train()
    if int(os.environ.get("RANK", "0")) == 0:
        last = trainer.state.log_history[-1]
        keys = ("flopmeter/step", "perf/tokens_per_second", "perf/tflops_per_second", "perf/mfu",
                "train/tokens_seen", "train/batch_efficiency", "total_flos")
        print("last log:", {k: last[k] for k in keys if k in last})
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1))


if __name__ == "__main__":
    main()
