"""Shared fixtures of the Python suite (run by scripts/test.sh against the installed package)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# No example database in the source tree: every run draws its examples afresh (and CI's clone stays clean).
settings.register_profile("flopmeter", database=None)
settings.load_profile("flopmeter")

import flopmeter

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """The bundled `flopmeter` tool, as `python -m flopmeter ARGS` runs it."""
    return subprocess.run([sys.executable, "-m", "flopmeter", *args], capture_output=True, text=True, check=False)


def cli_json(*args: str):
    done = run_cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# Qwen3-VL-2B-Instruct's config.json as transformers writes it (the FLOP fields are those of
# model_configs/qwen3_vl_2b.toml; the rest is what a real file carries and flopmeter ignores).
QWEN3_VL_2B_CONFIG = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "image_token_id": 151655,
    "model_type": "qwen3_vl",
    "text_config": {
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643, "dtype": "bfloat16",
        "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
        "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 262144,
        "model_type": "qwen3_vl_text", "num_attention_heads": 16, "num_hidden_layers": 28,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "rope_theta": 5000000, "use_cache": True, "vocab_size": 151936,
    },
    "tie_word_embeddings": True,
    "transformers_version": "4.57.0.dev0",
    "video_token_id": 151656,
    "vision_config": {
        "deepstack_visual_indexes": [5, 11, 17], "depth": 24, "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 1024, "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 4096,
        "model_type": "qwen3_vl", "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 2048,
        "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
    },
    "vision_end_token_id": 151653,
    "vision_start_token_id": 151652,
}


@pytest.fixture
def qwen3_vl_2b_config():
    return json.loads(json.dumps(QWEN3_VL_2B_CONFIG))


@pytest.fixture(scope="session")
def shipped():
    names = flopmeter.shipped_models()
    assert len(names) >= 15, names
    return names
