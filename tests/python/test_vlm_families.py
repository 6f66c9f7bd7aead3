"""The vision-language families beyond Qwen3-VL (qwen2_vl, qwen2_5_vl, internvl, gemma3) from Python: FlopModel's
exact FLOPs of each family's real config.json against the hand-derived terms (tests/test_vlm_families.cpp has the
derivations), the same number from `flopmeter estimate --json` for images and videos, and a Meter that bills them."""

from __future__ import annotations

import time

import pytest

import flopmeter

from conftest import REPO, cli_json

DATA = REPO / "tests" / "data" / "vlm"
QUIET = {"console": False}

# Qwen2.5-VL-3B (coefficients by hand in tests/test_vlm_families.cpp): one 1000-token document, an image 1 x 36 x 50
# (merged 18 x 25: windows of 4 x 4 merged tokens, the last row 2 and the last column 1 wide) and a video of 3
# frames of 16 x 16 patches. Window pairs (4*16 + 2^2) * (6*16 + 1) * 2^4 + 3 * 32 * 32 * 16 = 154,688; per-frame
# pairs 1800^2 + 3 * 256^2 = 3,436,608; patches 2,568; merged 642; causal 500,500.
QWEN25_FLOPS = (18514182144 * 1000 + 884736 * 500500 + 3779788800 * 2568 + 61440 * 3436608 + 430080 * 154688
                + 6021120 * 2568 + 220200960 * 642)


def test_qwen2_5_vl_window_pairs_and_video_exactly():
    model = flopmeter.FlopModel(str(DATA / "qwen2.5-vl-3b-instruct.json"))
    batch = dict(document_lengths=[1000], grid_thw=[[1, 36, 50], [3, 16, 16]])
    counts = model.counts(**batch)
    assert counts["vision_window_pairs"] == 154688 and counts["vision_pairs_per_frame"] == 3436608
    assert model.flops(**batch) == QWEN25_FLOPS
    out = cli_json("estimate", str(DATA / "qwen2.5-vl-3b-instruct.json"), "--docs", "1000", "--images",
                   "1x36x50,3x16x16")
    assert out["flops"] == QWEN25_FLOPS and out["counts"]["vision_window_pairs"] == 154688


def test_internvl_tiles_carry_a_cls_token():
    # InternVL3-8B (as far as confirmed): an image of 5 tiles is the item 5 x 32 x 32: 5,120 patches, 5 CLS tokens,
    # 5 * 1025^2 pairs, 1,280 decoder tokens after the pixel shuffle.
    model = flopmeter.FlopModel(str(DATA / "internvl3-8b-hf-partial.json"))
    counts = model.counts(document_lengths=[600], grid_thw=[[5, 32, 32]])
    assert counts["vision_cls_tokens"] == 5 and counts["vision_pairs_per_frame"] == 5 * 1025 ** 2
    assert counts["merged_tokens"] == 1280
    c = model.coefficients
    assert model.flops(document_lengths=[600], grid_thw=[[5, 32, 32]]) == (
        c["dense_per_token"] * 600 + c["text_attn_pair"] * 180300 + 1811939328 * (5120 + 5) + 294912 * 5 * 1025 ** 2
        + 2408448 * 5120 + 165150720 * 1280)
    with pytest.raises(ValueError, match="not a whole tile"):
        model.counts(document_lengths=[600], grid_thw=[[1, 32, 30]])


def test_gemma3_image_blocks_and_every_family_from_the_cli():
    model = flopmeter.FlopModel(str(DATA / "gemma-3-4b-it.json"))
    # Two images of 256 tokens each: 256 * 255 / 2 = 32,640 block pairs each.
    counts = model.counts(document_lengths=[600], grid_thw=[[2, 64, 64]])
    assert counts["image_block_pairs"] == 65280 and counts["merged_tokens"] == 512
    for config, images in [("qwen2-vl-2b-instruct.json", "2x28x28"), ("qwen2.5-vl-7b-instruct.json", "4x20x30"),
                           ("internvl3-8b-hf-partial.json", "3x32x32"), ("gemma-3-27b-it.json", "1x64x64")]:
        out = cli_json("estimate", str(DATA / config), "--docs", "700,300", "--images", images)
        grids = [[int(x) for x in images.split("x")]]
        assert out["flops"] == flopmeter.FlopModel(str(DATA / config)).flops(document_lengths=[700, 300],
                                                                            grid_thw=grids), config


def meter_flops_per_token(model, batch, **extra):
    """FLOPs per real token of one interval of one micro-batch, as a Meter reports them."""
    with flopmeter.Meter(model=model, peak={"tflops_per_gpu": 1.0}, sinks=QUIET, **extra) as meter:
        assert meter.on_microbatch(**batch, samples=1)
        time.sleep(0.005)
        meter.on_log(1)
        record = meter.flush()
    assert record["health/bad_microbatches"] == 0
    return record["perf/tflops_per_second"] * 1e12 / record["perf/tokens_per_second"]


def test_a_meter_bills_a_windowed_vit_and_a_frozen_internvit():
    batch = dict(document_lengths=[1000], grid_thw=[[1, 36, 50], [3, 16, 16]])
    assert meter_flops_per_token(str(DATA / "qwen2.5-vl-3b-instruct.json"), batch) == pytest.approx(
        QWEN25_FLOPS / 1000, rel=1e-12)
    # The InternVL default: a frozen InternViT under a trained projector and decoder. The ViT runs forward only
    # (a third of its training work; the patch embedding half, having no input gradient either), the projector and
    # the decoder as in full training.
    config = str(DATA / "internvl3-8b-hf-partial.json")
    batch = dict(document_lengths=[600], grid_thw=[[5, 32, 32]])
    full = flopmeter.FlopModel(config)
    c = full.coefficients
    frozen_flops = (full.flops(**batch) - (2 * 1811939328 // 3) * (5120 + 5) - (2 * 294912 // 3) * 5 * 1025 ** 2
                    - (2408448 // 2) * 5120)
    assert meter_flops_per_token(config, batch, frozen=["vision"]) == pytest.approx(frozen_flops / 600, rel=1e-12)
    assert c["merger_per_merged_token"] == 165150720
