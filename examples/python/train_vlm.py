"""A small PyTorch training loop of a vision-language model, metered by flopmeter.

Launch (2 CPU ranks over Gloo, DDP):

    python -m torch.distributed.run --standalone --nproc_per_node 2 examples/python/train_vlm.py --output-dir out/pyex

(with Debian's torch 1.13 on Python 3.11 add ``--redirects 2 --tee 2``: see README.md.)

Also runs as one process (plain ``python examples/python/train_vlm.py``). What runs, every size read from
``tiny_vl.toml`` (the model config flopmeter counts with, so the model that runs and the model that is counted
are one description):

    vision tower  patch embedding (a Linear of in_channels*temporal_patch_size*patch_size^2 -> hv, the map
                  Qwen's Conv3d with stride = kernel computes), `depth` ViT blocks (LayerNorm, fused qkv,
                  bidirectional attention inside each temporal patch of each item, proj, LayerNorm, GELU MLP),
                  the patch merger (LayerNorm, spatial_merge_size^2 patches -> one token, Linear, GELU, Linear)
    decoder       token embedding with the merged vision tokens written over the image placeholders,
                  `num_hidden_layers` layers of RMSNorm + GQA causal attention inside each document (q/k
                  RMSNorm, no output gate) + RMSNorm + SwiGLU, final RMSNorm, LM head tied to the embedding

Not modelled (element-wise work only, no FLOP term changes): RoPE / M-RoPE, the ViT position embeddings,
dropout. Attention is computed as one masked square over the row (block-diagonal by document, causal), so the
example executes about 2x the causal pairs flopmeter bills (examples/FLOP_AGREEMENT.md, difference 1).

The data is deterministic: micro-batch k (= step * microbatches + i, counted from 0) on rank r is a 128-token
row laid out as template (k + r) % 3 of ROW_TEMPLATES, with token values from a generator seeded by
(seed, r, k). The example hands flopmeter each micro-batch's cu_seqlens, image_grid_thw, padding, samples (its
documents), the sum of its per-token losses and its label tokens; at each log step the learning rate, the
gradient norm, and the data and forward-backward time of the interval. Rank 0 prints every record.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

import flopmeter

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL_CONFIG = HERE / "tiny_vl.toml"

ROW_LENGTH = 128
PAD_ID = 0          # padding at the end of a row
IMAGE_ID = 1        # the placeholder of one merged vision token
FIRST_TEXT_ID = 2   # text tokens are FIRST_TEXT_ID .. vocab_size - 1
IGNORE = -100       # no label
IMAGE_OFFSET = 2    # an image's placeholders start this many tokens into its document

# The rows: document lengths (the rest of the 128 tokens is padding) and images as
# (document index, t, h, w) with the grid in patches (t = temporal patches).
ROW_TEMPLATES: Tuple[Dict[str, Any], ...] = (
    {"documents": (40, 56, 32), "images": ((0, 1, 4, 4), (1, 1, 4, 8))},   # 3 documents, no padding
    {"documents": (100, 20), "images": ((0, 2, 4, 4),)},                  # 2 documents, 8 padding, a video
    {"documents": (30, 30, 30, 20), "images": ((2, 1, 8, 8),)},          # 4 documents, 18 padding
)


def template_index(rank: int, k: int) -> int:
    """Which template micro-batch k of rank r uses."""
    return (k + rank) % len(ROW_TEMPLATES)


# ---------------------------------------------------------------- the model config


def load_model_config(path: Path) -> Dict[str, Any]:
    """The [text_config] and [vision_config] sizes of a flopmeter model TOML (model_configs/SCHEMA.md)."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        raise SystemExit("train_vlm.py reads the model TOML with tomllib: run it with Python >= 3.11") from None
    with open(path, "rb") as f:
        config = tomllib.load(f)
    model_type = config["model"]["model_type"]
    if model_type != "qwen3_vl":
        raise SystemExit(f"{path}: this example builds a Qwen3-VL-style model (model_type 'qwen3_vl'), "
                         f"not {model_type!r}")
    vision = config["vision_config"]
    if vision.get("deepstack_visual_indexes"):
        raise SystemExit(f"{path}: this example builds no DeepStack mergers (deepstack_visual_indexes = [])")
    return config


# ---------------------------------------------------------------- the model


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """q, k, v: [heads, n, d]; allowed: [n, n] bool. Softmax attention over the allowed pairs."""
    scores = (q @ k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class VisionBlock(nn.Module):
    """LayerNorm, fused qkv, attention inside each temporal patch, proj; LayerNorm, GELU MLP."""

    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, intermediate)
        self.fc2 = nn.Linear(intermediate, hidden)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        n, hidden = x.shape
        qkv = self.qkv(self.norm1(x)).view(n, 3, self.heads, hidden // self.heads).permute(1, 2, 0, 3)
        attended = masked_attention(qkv[0], qkv[1], qkv[2], allowed).transpose(0, 1).reshape(n, hidden)
        x = x + self.proj(attended)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class VisionTower(nn.Module):
    def __init__(self, vision: Dict[str, Any]) -> None:
        super().__init__()
        hidden = vision["hidden_size"]
        patch_input = vision["in_channels"] * vision["temporal_patch_size"] * vision["patch_size"] ** 2
        self.merge = vision["spatial_merge_size"] ** 2  # patches per merged token
        self.patch_embed = nn.Linear(patch_input, hidden)
        self.blocks = nn.ModuleList(VisionBlock(hidden, vision["num_heads"], vision["intermediate_size"])
                                    for _ in range(vision["depth"]))
        # The patch merger: spatial_merge_size^2 neighbouring patches (consecutive rows) -> one text token.
        self.merger_norm = nn.LayerNorm(hidden)
        self.merger_fc1 = nn.Linear(self.merge * hidden, self.merge * hidden)
        self.merger_fc2 = nn.Linear(self.merge * hidden, vision["out_hidden_size"])
        self.run_block = lambda block, x, allowed: block(x, allowed)  # TinyVLM's checkpoint, when it asks

    def forward(self, pixel_patches: torch.Tensor, frame_ids: torch.Tensor) -> torch.Tensor:
        """pixel_patches [patches, patch_input], item by item, frame by frame, each frame's patches in merge
        order; frame_ids [patches]: which temporal patch of which item each patch belongs to."""
        x = self.patch_embed(pixel_patches)
        allowed = frame_ids[:, None] == frame_ids[None, :]
        for block in self.blocks:
            x = self.run_block(block, x, allowed)
        x = self.merger_norm(x).reshape(-1, self.merge * x.shape[-1])
        return self.merger_fc2(F.gelu(self.merger_fc1(x)))


class DecoderLayer(nn.Module):
    """RMSNorm, GQA attention (q/k RMSNorm, no output gate), RMSNorm, SwiGLU."""

    def __init__(self, text: Dict[str, Any]) -> None:
        super().__init__()
        h, hd = text["hidden_size"], text["head_dim"]
        self.heads, self.kv_heads, self.head_dim = text["num_attention_heads"], text["num_key_value_heads"], hd
        self.input_norm = RMSNorm(h)
        self.q_proj = nn.Linear(h, self.heads * hd, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(self.heads * hd, h, bias=False)
        self.q_norm = RMSNorm(hd)
        self.k_norm = RMSNorm(hd)
        self.post_norm = RMSNorm(h)
        self.gate_proj = nn.Linear(h, text["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(h, text["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(text["intermediate_size"], h, bias=False)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        y = self.input_norm(x)
        q = self.q_norm(self.q_proj(y).view(n, self.heads, self.head_dim)).transpose(0, 1)
        k = self.k_norm(self.k_proj(y).view(n, self.kv_heads, self.head_dim)).transpose(0, 1)
        v = self.v_proj(y).view(n, self.kv_heads, self.head_dim).transpose(0, 1)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
        attended = masked_attention(q, k, v, allowed).transpose(0, 1).reshape(n, self.heads * self.head_dim)
        x = x + self.o_proj(attended)
        y = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


def checkpoint_early_stop_available() -> bool:
    """Whether torch's non-reentrant checkpoint stops once the last saved tensor is recomputed (torch >= 2.1;
    torch 1.13 re-runs the whole block)."""
    return hasattr(torch.utils.checkpoint, "set_checkpoint_early_stop")


def recompute_policy(use_reentrant: bool) -> str:
    """The flopmeter policy that bills what torch.utils.checkpoint runs again (METRICS.md, "Activation
    recomputation"): the whole block for the reentrant checkpoint, and for the non-reentrant one where torch
    has no early stop; the block but its final GEMM (down_proj, fc2) where it has."""
    return "full_early_stop" if not use_reentrant and checkpoint_early_stop_available() else "full"


class TinyVLM(nn.Module):
    """``checkpoint``: None, or "reentrant" / "non_reentrant": every decoder layer (and with
    ``checkpoint_vision`` every ViT block) runs under torch.utils.checkpoint, keeping no activations in the
    forward and running its forward again in the backward (bill it with recompute_policy())."""

    def __init__(self, config: Dict[str, Any], checkpoint: Any = None, checkpoint_vision: bool = False) -> None:
        super().__init__()
        if checkpoint not in (None, "reentrant", "non_reentrant"):
            raise ValueError(f"checkpoint must be None, 'reentrant' or 'non_reentrant', got {checkpoint!r}")
        self.checkpoint = checkpoint
        self.checkpoint_vision = checkpoint_vision
        text = config["text_config"]
        if not text["tie_word_embeddings"]:
            raise SystemExit("this example ties the LM head to the embedding (tie_word_embeddings = true)")
        self.embed = nn.Embedding(text["vocab_size"], text["hidden_size"])
        nn.init.normal_(self.embed.weight, std=0.02)  # tied: the logits start near uniform (loss ~ ln(vocab))
        self.vision = VisionTower(config["vision_config"])
        self.layers = nn.ModuleList(DecoderLayer(text) for _ in range(text["num_hidden_layers"]))
        self.final_norm = RMSNorm(text["hidden_size"])
        if checkpoint is not None and checkpoint_vision:
            self.vision.run_block = self.run_block  # the tower's blocks go through the same checkpoint

    def run_block(self, block: nn.Module, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """One decoder layer or ViT block, under torch.utils.checkpoint when checkpointing is on."""
        if self.checkpoint is None or not torch.is_grad_enabled():
            return block(x, allowed)
        return torch.utils.checkpoint.checkpoint(block, x, allowed, use_reentrant=self.checkpoint == "reentrant")

    def forward(self, batch: Dict[str, Any]) -> torch.Tensor:
        """The SUM of the per-token cross-entropy over the row's label tokens (a scalar)."""
        x = self.embed(batch["input_ids"])
        if batch["pixel_patches"] is not None:
            merged = self.vision(batch["pixel_patches"], batch["frame_ids"])
            x = x.index_copy(0, batch["image_positions"], merged)
        doc = batch["token_document"]
        n = doc.shape[0]
        position = torch.arange(n)
        # Causal inside each document; a padding token (its own "document") sees only itself.
        allowed = (doc[:, None] == doc[None, :]) & (position[None, :] <= position[:, None])
        for layer in self.layers:
            x = self.run_block(layer, x, allowed)
        logits = self.final_norm(x) @ self.embed.weight.t()  # tied LM head
        return F.cross_entropy(logits, batch["labels"], ignore_index=IGNORE, reduction="sum")


# ---------------------------------------------------------------- the data


def make_row(config: Dict[str, Any], seed: int, rank: int, k: int) -> Dict[str, Any]:
    """Micro-batch k of rank `rank`: one packed row of ROW_LENGTH tokens."""
    text, vision = config["text_config"], config["vision_config"]
    vocab = text["vocab_size"]
    merge = vision["spatial_merge_size"] ** 2
    patch_input = vision["in_channels"] * vision["temporal_patch_size"] * vision["patch_size"] ** 2
    template = ROW_TEMPLATES[template_index(rank, k)]
    documents: Sequence[int] = template["documents"]
    generator = torch.Generator().manual_seed(seed * 1_000_003 + rank * 10_007 + k)

    input_ids = torch.full((ROW_LENGTH,), PAD_ID, dtype=torch.int64)
    token_document = torch.arange(ROW_LENGTH, dtype=torch.int64) + len(documents)  # padding: one each
    starts = [0]
    for length in documents:
        starts.append(starts[-1] + length)
    assert starts[-1] <= ROW_LENGTH
    for d, length in enumerate(documents):
        # A learnable pattern: each document steps through the vocabulary by its own stride.
        first = int(torch.randint(0, vocab - FIRST_TEXT_ID, (1,), generator=generator))
        stride = int(torch.randint(1, 8, (1,), generator=generator))
        i = torch.arange(length)
        input_ids[starts[d]:starts[d + 1]] = FIRST_TEXT_ID + (first + stride * i) % (vocab - FIRST_TEXT_ID)
        token_document[starts[d]:starts[d + 1]] = d

    grids, positions, frame_ids = [], [], []
    frames = 0
    for d, t, h, w in template["images"]:
        merged = t * h * w // merge
        begin = starts[d] + IMAGE_OFFSET
        assert begin + merged < starts[d + 1], "an image must fit inside its document"
        input_ids[begin:begin + merged] = IMAGE_ID
        positions.append(torch.arange(begin, begin + merged))
        grids.append((t, h, w))
        frame_ids.append(torch.arange(frames, frames + t).repeat_interleave(h * w))
        frames += t
    patches = sum(t * h * w for t, h, w in grids)

    # Next-token labels inside a document, for text tokens followed by a text token.
    labels = torch.full((ROW_LENGTH,), IGNORE, dtype=torch.int64)
    following = input_ids[1:]
    same_document = token_document[1:] == token_document[:-1]
    has_label = same_document & (input_ids[:-1] >= FIRST_TEXT_ID) & (following >= FIRST_TEXT_ID)
    labels[:-1] = torch.where(has_label, following, torch.full_like(following, IGNORE))

    return {
        "input_ids": input_ids,
        "labels": labels,
        "label_tokens": int(has_label.sum()),
        "token_document": token_document,
        "cu_seqlens": torch.tensor(starts, dtype=torch.int64),
        "padding_tokens": ROW_LENGTH - starts[-1],
        "samples": len(documents),
        "image_grid_thw": torch.tensor(grids, dtype=torch.int64).reshape(-1, 3),
        "pixel_patches": torch.randn(patches, patch_input, generator=generator) if patches else None,
        "frame_ids": torch.cat(frame_ids) if frame_ids else None,
        "image_positions": torch.cat(positions) if positions else None,
    }


# ---------------------------------------------------------------- the loop


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output-dir", type=Path, required=True, help="JSONL and TensorBoard go here")
    p.add_argument("--steps", type=int, default=30, help="optimizer steps (default 30)")
    p.add_argument("--microbatches", type=int, default=2, help="micro-batches per optimizer step (default 2)")
    p.add_argument("--log-interval", type=int, default=1, help="steps between on_log calls (default 1: every step)")
    p.add_argument("--lr", type=float, default=1e-2, help="peak learning rate (default 1e-2)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--model-config", type=Path, default=DEFAULT_MODEL_CONFIG,
                   help="the flopmeter model TOML the model is built from and counted with (default tiny_vl.toml)")
    p.add_argument("--checkpoint", choices=("reentrant", "non_reentrant"), default=None,
                   help="activation checkpointing of every decoder layer and ViT block with torch.utils.checkpoint; "
                        "flopmeter then reports perf/hfu beside perf/mfu (default: none)")
    p.add_argument("--peak-tflops", type=float, default=0.5,
                   help="nominal peak TFLOP/s per rank for perf/mfu (default 0.5: a CPU, so MFU is illustrative)")
    args = p.parse_args(argv)
    for name in ("steps", "microbatches", "log_interval", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def learning_rate(args: argparse.Namespace, step: int) -> float:
    """Linear warm-up over 2 steps, then cosine down to 10% of the peak at the last step."""
    if step <= 2:
        return args.lr * step / 2
    progress = (step - 2) / max(1, args.steps - 2)
    return args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group(backend="gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    out = args.output_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)

    config = load_model_config(args.model_config)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = TinyVLM(config, checkpoint=args.checkpoint, checkpoint_vision=args.checkpoint is not None)
    recompute = ({"policy": recompute_policy(args.checkpoint == "reentrant"), "vision": True}
                 if args.checkpoint is not None else None)
    ddp = nn.parallel.DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    # Every rank makes its Meter at the same point: with torch.distributed initialised it makes flopmeter's
    # own Gloo group over the world (a collective), so a rank that skips an on_log never hangs DDP's.
    meter = flopmeter.Meter(
        model=str(args.model_config.resolve()),
        peak={"tflops_per_gpu": args.peak_tflops},
        logging={"tpi_multiplier": float(args.microbatches), "topk": 2, "emit": "rank0"},
        sinks={"console": False, "jsonl": str(out / "flopmeter.jsonl"), "tensorboard": str(out / "tensorboard")},
        recompute=recompute,
    )
    if rank == 0:
        print(f"{meter!r}: {world} rank(s), {args.steps} steps x {args.microbatches} micro-batches of "
              f"{ROW_LENGTH} tokens per rank", flush=True)

    def report(label: str, record: Any) -> None:
        if rank == 0 and record is not None:
            print(f"flopmeter record ({label}): {json.dumps(record, sort_keys=True)}", flush=True)

    losses: List[float] = []
    microbatch_seconds = log_seconds = 0.0  # time inside the Meter's calls
    log_calls = 0
    data_time = forward_backward_time = 0.0
    samples_fed = 0
    start = time.perf_counter()
    with meter:
        for step in range(1, args.steps + 1):
            t0 = time.perf_counter()
            rows = [make_row(config, args.seed, rank, (step - 1) * args.microbatches + i)
                    for i in range(args.microbatches)]
            step_labels = sum(row["label_tokens"] for row in rows)
            t1 = time.perf_counter()
            data_time += t1 - t0
            lr = learning_rate(args, step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            step_loss = 0.0
            for i, row in enumerate(rows):
                last = i == len(rows) - 1
                tf = time.perf_counter()
                sync = ddp.no_sync() if distributed and not last else contextlib.nullcontext()
                with sync:
                    loss_sum = ddp(row)
                    (loss_sum / step_labels).backward()
                forward_backward_time += time.perf_counter() - tf
                tm = time.perf_counter()
                meter.on_microbatch(cu_seqlens=row["cu_seqlens"], grid_thw=row["image_grid_thw"],
                                    padding_tokens=row["padding_tokens"], samples=row["samples"],
                                    loss_sum=loss_sum.detach(), label_tokens=row["label_tokens"])
                microbatch_seconds += time.perf_counter() - tm
                samples_fed += row["samples"]
                step_loss += float(loss_sum.detach())
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(step_loss / step_labels)
            if step % args.log_interval == 0:
                tm = time.perf_counter()
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # the CPU's "device" memory
                record = meter.on_log(step, learning_rate=lr, grad_norm=grad_norm, data_time=data_time,
                                      forward_backward_time=forward_backward_time, peak_memory_bytes=peak)
                log_seconds += time.perf_counter() - tm
                log_calls += 1
                data_time = forward_backward_time = 0.0
                report(f"on_log step {step}", record)
        tm = time.perf_counter()
        record = meter.flush()  # the last interval, still waiting for its collective
        log_seconds += time.perf_counter() - tm
        report("flush", record)
        health = meter.health
    wall = time.perf_counter() - start

    if rank == 0:
        microbatches = args.steps * args.microbatches
        inside = microbatch_seconds + log_seconds
        print(f"rank 0: loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps; fed {samples_fed} "
              f"samples; wall {wall:.2f} s, inside flopmeter {inside * 1e3:.2f} ms ({100 * inside / wall:.3f}%): "
              f"on_microbatch {1e6 * microbatch_seconds / microbatches:.1f} us/call, on_log + flush "
              f"{1e3 * log_seconds / (log_calls + 1):.2f} ms/call; health {json.dumps(health, sort_keys=True)}",
              flush=True)
        print(f"JSONL: {out / 'flopmeter.jsonl'}\nTensorBoard: {out / 'tensorboard'}", flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
