"""A hand-written Accelerate training loop, metered by `flopmeter.watch(model, optimizer)` and nothing else.

The loop is what Accelerate's guides write: `accelerator.prepare`, `accelerator.accumulate`, `backward`,
`optimizer.step()`, with an evaluation pass every few steps. The only flopmeter line is `watch`: it reads each
training micro-batch from the model's forward arguments, closes a step at each `optimizer.step()` that runs (the
accumulation is counted), and leaves the evaluation out. The same loop under FSDP or DeepSpeed (an
`accelerate launch` config) needs no other line.

Run it (PyPI's torch 2.x with transformers and accelerate; a tiny Qwen3 built from a config, on the CPU):
    python -m torch.distributed.run --standalone --nproc_per_node 2 examples/python/watch_loop.py
    python examples/python/watch_loop.py --steps 6          # one process
Rank 0 prints each record as one JSON line (`record {...}`).
"""

from __future__ import annotations

import argparse
import json
import random
from typing import Dict, List

import torch

import flopmeter


def batches(seed: int, count: int, rows: int = 2) -> List[Dict[str, torch.Tensor]]:
    """`count` right-padded batches of `rows` documents of 8 to 48 tokens (labels on the real tokens)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        lengths = [rng.randint(8, 48) for _ in range(rows)]
        width = max(lengths)
        ids = torch.zeros(rows, width, dtype=torch.int64)
        mask = torch.zeros(rows, width, dtype=torch.int64)
        for r, n in enumerate(lengths):
            ids[r, :n] = torch.tensor([rng.randint(3, 63) for _ in range(n)])
            mask[r, :n] = 1
        out.append({"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)})
    return out


def tiny_model():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    return Qwen3ForCausalLM(Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=8, pad_token_id=0,
                                        max_position_embeddings=256, tie_word_embeddings=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps")
    parser.add_argument("--accumulation", type=int, default=2, help="micro-batches per optimizer step")
    parser.add_argument("--log-every", type=int, default=2, help="optimizer steps per record")
    args = parser.parse_args()

    from accelerate import Accelerator

    accelerator = Accelerator(gradient_accumulation_steps=args.accumulation, cpu=True)
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)

    printed = (lambda record: print("record", json.dumps(record), flush=True)) if accelerator.is_main_process \
        else None
    meter = flopmeter.watch(model, optimizer, log_every=args.log_every, on_record=printed,
                            peak={"tflops_per_gpu": 1.0}, sinks={"console": False})

    train = batches(seed=accelerator.process_index, count=args.steps * args.accumulation)
    for i, batch in enumerate(train):
        with accelerator.accumulate(model):
            accelerator.backward(model(**batch).loss)
            optimizer.step()  # the inner optimizer steps every `accumulation` micro-batches
            optimizer.zero_grad()
        if (i + 1) % (2 * args.accumulation) == 0:  # evaluation: not counted
            model.eval()
            with torch.no_grad():
                for held_out in batches(seed=100, count=2):
                    model(**held_out)
            model.train()
    meter.close()


if __name__ == "__main__":
    main()
