"""examples/python/train_vlm.py: a 2-rank torchrun job (Gloo, DDP) that reports through flopmeter.Meter.

The job runs 4 optimizer steps x 2 micro-batches per rank with on_log at every step, so flopmeter emits the
records of steps 1, 2, 3 (at the on_log of steps 2, 3, 4) and 4 (at flush) into the JSONL file. Its data is
deterministic (train_vlm.ROW_TEMPLATES): micro-batch k of rank r is template (k + r) % 3, and

    template 0: documents 40 + 56 + 32 = 128 tokens, 0 padding, 3 samples
    template 1: documents 100 + 20     = 120 tokens, 8 padding, 2 samples
    template 2: documents 30+30+30+20  = 110 tokens, 18 padding, 4 samples

The expected counts below are derived from that table by hand, step by step (k = 2*(step-1) + i).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed  # noqa: E402

import flopmeter  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "python" / "train_vlm.py"
MODEL_TOML = ROOT / "examples" / "python" / "tiny_vl.toml"

STEPS = 4
MICROBATCHES = 2

# step:  rank 0's k, templates -> samples | rank 1's k, templates -> samples | both
#   1:   k 0,1: T0,T1 -> 3+2 = 5          | T1,T2 -> 2+4 = 6                  | 11
#   2:   k 2,3: T2,T0 -> 4+3 = 7          | T0,T1 -> 3+2 = 5                  | 12
#   3:   k 4,5: T1,T2 -> 2+4 = 6          | T2,T0 -> 4+3 = 7                  | 13
#   4:   k 6,7: T0,T1 -> 3+2 = 5          | T1,T2 -> 2+4 = 6                  | 11
# train/num_samples is the running DP sum: 11, 23, 36, 47.
EXPECTED_NUM_SAMPLES = [11, 23, 36, 47]
# Real tokens per step, the same way: step 1: rank 0 128+120, rank 1 120+110 -> 478; step 2: 110+128, 128+120
# -> 486; step 3: 120+110, 110+128 -> 468; step 4: 128+120, 120+110 -> 478. Running sums: 478, 964, 1432, 1910.
EXPECTED_TOKENS_SEEN = [478, 964, 1432, 1910]
# batch_efficiency = real / (real + padding) over the interval's 4 rows of 128 = 512 device tokens.
EXPECTED_BATCH_EFFICIENCY = [478 / 512, 486 / 512, 468 / 512, 478 / 512]

# Keys every record of this job carries: the example passes learning rate, grad norm, both times and a peak
# memory, and sets a peak TFLOP/s (so perf/mfu is there).
EXPECTED_KEYS = {
    "step", "perf/tokens_per_second", "perf/tokens_per_second_per_gpu", "perf/tflops_per_second", "perf/mfu",
    "perf/tflops_per_second_hardware", "perf/hfu",
    "perf/step_time", "perf/optimizer_step_time", "perf/data_time", "perf/fwd_bwd_time",
    "perf/log_wait_ms", "perf/mem_gib", "train/loss", "train/lr", "train/grad_norm", "train/num_samples",
    "train/tokens_seen", "train/batch_efficiency", "health/bad_microbatches", "health/failed_collectives",
}


def _load_example():
    spec = importlib.util.spec_from_file_location("train_vlm", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with Gloo is not available")
    out = tmp_path_factory.mktemp("train_vlm")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    # --redirects 2 --tee 2 (tee stderr): torchrun of torch 1.13 on Python 3.11 cannot parse its own default
    # "0" there (Python 3.11 no longer iterates a Flag's 0 member) and stops with "'NoneType' object has no
    # attribute 'get'"; the tee keeps stderr on the console and leaves copies under --log_dir.
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "--redirects", "2", "--tee", "2", "--log_dir", str(out / "torchrun"),
               str(EXAMPLE), "--output-dir", str(out / "run"), "--steps", str(STEPS),
               "--microbatches", str(MICROBATCHES), "--log-interval", "1"]
    result = subprocess.run(command, cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            timeout=120)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return out / "run", result


def _records(run_dir: Path):
    lines = (run_dir / "flopmeter.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]  # each line a whole JSON object, or this raises


def test_jsonl_holds_one_whole_record_per_step_with_the_expected_keys(example_run):
    run_dir, _ = example_run
    text = (run_dir / "flopmeter.jsonl").read_text()
    assert text.endswith("\n")
    records = _records(run_dir)
    # Records of steps 1, 2, 3 (emitted one log later) and 4 (flush); rank 1 writes none (emit = "rank0").
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    for record in records:
        missing = EXPECTED_KEYS - record.keys()
        assert not missing, f"step {record['step']}: missing {sorted(missing)}"
        assert record["health/bad_microbatches"] == 0
        assert record["health/failed_collectives"] == 0
    assert not (run_dir / "flopmeter_1.jsonl").exists()


def test_num_samples_and_tokens_are_the_samples_and_tokens_the_example_fed(example_run):
    run_dir, _ = example_run
    records = _records(run_dir)
    assert [r["train/num_samples"] for r in records] == EXPECTED_NUM_SAMPLES
    assert [r["train/tokens_seen"] for r in records] == EXPECTED_TOKENS_SEEN
    assert [r["train/batch_efficiency"] for r in records] == pytest.approx(EXPECTED_BATCH_EFFICIENCY, rel=1e-12)
    # The warm-up lr schedule: step 1 is half the peak of 1e-2, step 2 the peak.
    assert records[0]["train/lr"] == pytest.approx(5e-3)
    assert records[1]["train/lr"] == pytest.approx(1e-2)


def test_tensorboard_directory_has_an_event_file(example_run):
    run_dir, _ = example_run
    events = list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1, events
    assert events[0].stat().st_size > 0


def test_rank_0_printed_the_records(example_run):
    run_dir, result = example_run
    printed = [line for line in result.stdout.splitlines() if line.startswith("flopmeter record (")]
    # on_log of steps 2, 3, 4 and the flush each return a record on rank 0 (the on_log of step 1 returns None).
    assert len(printed) == 4, result.stdout
    first = json.loads(printed[0].split(": ", 1)[1])
    assert first == _records(run_dir)[0]  # what on_log returned is what the JSONL sink wrote
    assert "fed 23 samples" in result.stdout  # rank 0's own count: 5 + 7 + 6 + 5 (see the table above)


def test_the_model_runs_the_shapes_flopmeter_counts():
    """Every matmul weight of the PyTorch model, against the coefficients of the TOML it is built from."""
    example = _load_example()
    config = example.load_model_config(MODEL_TOML)
    model = example.TinyVLM(config)
    coefficients = flopmeter.FlopModel(str(MODEL_TOML)).coefficients

    def weights(modules):
        return sum(m.weight.numel() for m in modules if isinstance(m, torch.nn.Linear))

    # Text: every Linear of the decoder layers plus the tied LM head (the embedding, vocab x hidden) is one
    # multiply-add per weight per token; x6 for training. By hand: per layer q 64*64 + k 64*32 + v 64*32 +
    # o 64*64 = 12,288 and SwiGLU 3*64*128 = 24,576; 2 layers 73,728; logits 512*64 = 32,768 -> 106,496 x 6
    # = 638,976.
    text = weights(model.layers.modules()) + model.embed.weight.numel()
    assert text == 106_496
    assert 6 * text == coefficients["dense_per_token"] == 638_976
    vision = model.vision
    # ViT blocks per patch: qkv 32*96 + proj 32*32 + MLP 2*32*64 = 8,192 -> x6 = 49,152.
    assert 6 * weights(vision.blocks.modules()) == coefficients["vision_per_patch"] == 49_152
    # Patch embedding 96*32 = 3,072 per patch, forward + weight gradient only: x4 = 12,288.
    assert 4 * vision.patch_embed.weight.numel() == coefficients["patch_embed_per_patch"] == 12_288
    # Merger per merged token: 128*128 + 128*64 = 24,576 -> x6 = 147,456.
    merger = vision.merger_fc1.weight.numel() + vision.merger_fc2.weight.numel()
    assert 6 * merger == coefficients["merger_per_merged_token"] == 147_456
    # Attention per pair: text 2 layers x (QK^T + PV) x 4 heads x 16 = 256 -> x6 = 1,536; ViT 1 block x 2 x 32
    # -> x6 = 384.
    assert 6 * 2 * 2 * 4 * 16 == coefficients["text_attn_pair"]
    assert 6 * 2 * 32 == coefficients["vision_attn_pair"]
    assert vision.merge == coefficients["patches_per_merged_token"] == 4


def test_the_rows_match_their_templates():
    """What the example hands on_microbatch for one row, against the table in the module docstring."""
    example = _load_example()
    config = example.load_model_config(MODEL_TOML)
    row = example.make_row(config, seed=1234, rank=1, k=1)  # template (1 + 1) % 3 = 2
    assert row["cu_seqlens"].tolist() == [0, 30, 60, 90, 110]
    assert row["padding_tokens"] == 18
    assert row["samples"] == 4
    assert row["image_grid_thw"].tolist() == [[1, 8, 8]]
    # 64 patches merge into 16 placeholders at tokens 62..77 (document 2 starts at 60, offset 2).
    assert row["image_positions"].tolist() == list(range(62, 78))
    assert row["pixel_patches"].shape == (64, 96)
    # Label tokens: a text token followed by a text token of its document. Documents 0, 1, 3: L - 1 each
    # (29 + 29 + 19 = 77); document 2 (30 tokens, 16 placeholders at offsets 2..17): pairs (0,1), then offsets
    # 18..29 give 11 pairs -> 12. Total 89.
    assert row["label_tokens"] == 89
    assert int((row["labels"] != example.IGNORE).sum()) == 89
