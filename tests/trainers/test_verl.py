"""verl's own FLOP counter, through flopmeter's `verl.plugins` entry point alone: nothing here imports
flopmeter.integrations.verl; `import verl` loads it, as in every verl process (driver and Ray workers).

verl's workers build `FlopsCounter(model_config)` once and call `estimate_flops(global_token_num, delta_time,
images_seqlens=...)` per update; `perf/mfu/actor` is `estimated * ppo_epochs / promised / world_size`. The
expected FLOPs are flopmeter.FlopModel of the same config over the same documents and frames."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch  # noqa: F401 - verl imports it anyway

import flopmeter


@pytest.fixture(autouse=True)
def h100_peak(monkeypatch):
    """verl's device peak lookup asks the accelerator, which this CPU machine has none of: H100's 989 TFLOP/s."""
    from verl.utils import flops_counter

    monkeypatch.setattr(flops_counter, "get_device_flops", lambda unit="T", device_name=None: 989.0)


def tiny(config_class, **extra):
    return config_class(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512, **extra)


def test_import_verl_installs_flopmeter_as_its_flop_counter():
    import verl  # noqa: F401 - the entry point runs here
    from verl.utils.flops_counter import FlopsCounter

    assert FlopsCounter._flopmeter_original is not None


def test_a_model_verl_knows_is_billed_exactly():
    from transformers import Qwen3Config
    from verl.utils.flops_counter import FlopsCounter

    config = tiny(Qwen3Config)
    counter = FlopsCounter(config)
    seqlens, delta = [12, 30, 7], 2.0
    estimated, promised = counter.estimate_flops(seqlens, delta)
    exact = flopmeter.FlopModel(config.to_dict()).flops(document_lengths=seqlens)
    assert estimated == pytest.approx(exact / delta / 1e12, rel=1e-12)
    assert promised == 989.0  # verl's own peak, beside the exact FLOPs
    # verl's own table bills the same batch otherwise (its attention term is not flopmeter's causal pairs).
    original = FlopsCounter._flopmeter_original[1](counter, seqlens, delta)[0]
    assert original != pytest.approx(estimated, rel=1e-9)


def test_a_model_verl_bills_at_zero_gets_its_exact_figure():
    from transformers import MixtralConfig
    from verl.utils.flops_counter import ESTIMATE_FUNC, FlopsCounter

    config = tiny(MixtralConfig, num_local_experts=4, num_experts_per_tok=2)
    assert config.model_type not in ESTIMATE_FUNC  # verl: "MFU will always be zero"
    estimated, _ = FlopsCounter(config).estimate_flops([40, 24], 1.0)
    assert estimated * 1e12 == pytest.approx(flopmeter.FlopModel(config.to_dict()).flops(document_lengths=[40, 24]),
                                             rel=1e-12) and estimated > 0


def test_images_are_billed_from_the_patches_verl_passes():
    from transformers import Qwen3VLConfig
    from verl.utils.flops_counter import FlopsCounter

    text = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2],
                                 "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, in_channels=3, patch_size=4,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32, num_position_embeddings=16,
                  deepstack_visual_indexes=[0])
    config = Qwen3VLConfig(text_config=text, vision_config=vision)
    # verl's images_seqlens: h * w patches per frame (repeat_interleave over t): an image of grid [1, 4, 8] and a
    # two-frame video of grid [2, 4, 4] are [32, 16, 16]. Qwen3-VL's tower attends over whole frames, so the
    # billing of [1, 2, 16], [1, 2, 8], [1, 2, 8] is the same as that of the true grids.
    estimated, _ = FlopsCounter(config).estimate_flops([50, 30], 1.0, images_seqlens=[32, 16, 16])
    exact = flopmeter.FlopModel(config.to_dict()).flops(document_lengths=[50, 30],
                                                         grid_thw=[[1, 4, 8], [2, 4, 4]])
    assert estimated * 1e12 == pytest.approx(exact, rel=1e-12)


def test_verl_use_external_plugins_none_keeps_verls_own_counter():
    code = ("import verl\nfrom verl.utils.flops_counter import FlopsCounter\n"
            "print(getattr(FlopsCounter, '_flopmeter_original', None) is None)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert done.stdout.strip().splitlines()[-1] == "True"
