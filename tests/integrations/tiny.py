"""Tiny models, a tokenizer and datasets for the integration suite, built in code (nothing from the hub), and a
collator wrapper that records what each batch fed, from which the tests derive their expected values."""

from __future__ import annotations

import random
from typing import Any, Dict, List

import torch

PAD, EOS, BOS = 0, 1, 2
IMAGE, VISION_START, VISION_END = 60, 61, 62
VOCAB = 64


def tokenizer():
    """A word-level tokenizer over VOCAB ids ("t3" is id 3); pad 0, eos 1."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<eos>": EOS, "<bos>": BOS}
    vocab.update({f"t{i}": i for i in range(3, VOCAB)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="t3"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")


def text_config_kwargs() -> Dict[str, Any]:
    return dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, max_position_embeddings=512, pad_token_id=PAD, eos_token_id=EOS,
                bos_token_id=BOS)


def qwen3(seed: int = 0):
    """A tiny Qwen3 text model (2 layers, hidden 32)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    return Qwen3ForCausalLM(Qwen3Config(**text_config_kwargs(), tie_word_embeddings=True))


def qwen3_vl(seed: int = 0):
    """A tiny Qwen3-VL model: a 2-block vision tower (patch 4, merge 2) and a 2-layer decoder."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    torch.manual_seed(seed)
    text = text_config_kwargs()
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2],
                               "mrope_interleaved": True}
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, in_channels=3, patch_size=4,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32, num_position_embeddings=16,
                  deepstack_visual_indexes=[0])
    config = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE, video_token_id=63,
                           vision_start_token_id=VISION_START, vision_end_token_id=VISION_END,
                           tie_word_embeddings=True)
    return Qwen3VLForConditionalGeneration(config)


def text_rows(count: int, seed: int = 0, low: int = 3, high: int = 40) -> List[Dict[str, List[int]]]:
    """`count` token rows of random lengths in [low, high], ending in eos."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        n = rng.randint(low, high)
        ids = [rng.randint(3, 59) for _ in range(n - 1)] + [EOS]
        rows.append({"input_ids": ids})
    return rows


class Recorder:
    """Wraps a data collator; keeps, per batch, the token lengths of the features it was given (the documents)
    and the batch's slots (rows x length), from which a test derives tokens, padding and FLOPs by hand."""

    def __init__(self, collator: Any) -> None:
        self.collator = collator
        self.batches: List[Dict[str, Any]] = []

    def __call__(self, features: List[Dict[str, Any]]) -> Any:
        batch = self.collator(features)
        ids = batch["input_ids"]
        entry = {"documents": [len(f["input_ids"]) for f in features], "slots": int(ids.numel())}
        if "image_grid_thw" in batch:
            entry["grids"] = batch["image_grid_thw"].tolist()
        if "seq_lengths" in features[0]:  # packed rows: each row's own documents
            entry["documents"] = [n for f in features for n in f["seq_lengths"]]
        self.batches.append(entry)
        return batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self.collator, name)


def vl_rows(count: int, seed: int = 0) -> List[Dict[str, Any]]:
    """`count` rows of one image each (grid [1, 4, 4] or [1, 4, 8]: 16 or 32 patches, 4 or 8 merged tokens)
    between the vision start and end tokens, then text."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        grid = [1, 4, rng.choice([4, 8])]
        image = [VISION_START] + [IMAGE] * (grid[0] * grid[1] * grid[2] // 4) + [VISION_END]
        text = [rng.randint(3, 59) for _ in range(rng.randint(3, 12))] + [EOS]
        rows.append({"input_ids": image + text, "image_grid_thw": grid})
    return rows


def vl_collate(features: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Right-padded rows, labels on the text only, random pixels: 3 channels x 2 frames x 4 x 4 per patch."""
    length = max(len(f["input_ids"]) for f in features)
    ids = torch.full((len(features), length), PAD, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for i, f in enumerate(features):
        ids[i, :len(f["input_ids"])] = torch.tensor(f["input_ids"])
        mask[i, :len(f["input_ids"])] = 1
    labels = ids.clone()
    labels[(mask == 0) | (ids == IMAGE) | (ids == VISION_START) | (ids == VISION_END)] = -100
    grids = torch.tensor([f["image_grid_thw"] for f in features], dtype=torch.int64)
    patches = int(grids.prod(dim=1).sum())
    return {"input_ids": ids, "attention_mask": mask, "labels": labels, "image_grid_thw": grids,
            "pixel_values": torch.randn(patches, 3 * 2 * 4 * 4),
            "mm_token_type_ids": (ids == IMAGE).to(torch.int64)}  # 1: an image token (what the processor returns)


def expected_flops(model: Any, batches: List[Dict[str, Any]]) -> List[int]:
    """Each batch's exact FLOPs by `model` (a flopmeter.FlopModel), from what Recorder kept: its documents, the
    rest of its slots padding, its images."""
    out = []
    for b in batches:
        kwargs = {"document_lengths": b["documents"], "padding_tokens": b["slots"] - sum(b["documents"])}
        if "grids" in b:
            kwargs["grid_thw"] = b["grids"]
        out.append(model.flops(**kwargs))
    return out
