"""FlopModel: the same numbers as the CLI, for every shipped config and random batches, from every input form."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

import flopmeter

from conftest import cli_json, run_cli


def test_coefficients_of_every_shipped_config_equal_the_clis_json(shipped):
    for name in shipped:
        assert flopmeter.FlopModel(name).coefficients == cli_json("coefficients", name), name


def test_qwen3_vl_2b_dense_coefficient_is_the_hand_derived_value():
    # Per token, multiply-adds (MACs) of the decoder (model_configs/qwen3_vl_2b.toml: hidden 2048, 28 layers,
    # 16 query heads and 8 KV heads of 128, intermediate 6144, vocab 151936):
    #   q, o: 2 x 2048 x (16 x 128) = 8,388,608; k, v: 2 x 2048 x (8 x 128) = 4,194,304 -> 12,582,912 per layer
    #   SwiGLU: 3 x 2048 x 6144 = 37,748,736 per layer; 28 layers: 28 x 50,331,648 = 1,409,286,144
    #   LM head: 2048 x 151936 = 311,164,928; total 1,720,451,072 MACs
    # Training = 6 FLOPs per MAC (forward 2, input gradient 2, weight gradient 2): 10,322,706,432.
    c = flopmeter.FlopModel("qwen3_vl_2b").coefficients
    assert c["dense_per_token"] == 6 * 1_720_451_072
    assert sum(c["dense_per_token_breakdown"].values()) == c["dense_per_token"]


def test_a_mamba2_hybrid_and_a_mapped_family_load_through_the_c_abi():
    # New model types need nothing in the Python package: FlopModel reads them through the C ABI.
    # Nemotron-Nano-9B-v2 (tests/test_mamba2_families.cpp derives it): per token 27 Mamba-2 layers of 152,010,752
    # multiply-adds, 4 attention layers of 55,050,240, 25 MLP layers of 140,492,800 and the LM head 587,202,560:
    # 8,424,013,824 MACs, x6 for training.
    configs = Path(__file__).resolve().parents[2] / "model_configs"
    c = flopmeter.FlopModel(configs / "nemotron_nano_9b_v2.toml").coefficients
    assert c["dense_per_token"] == 6 * 8_424_013_824
    # Apertus-8B's 2-matrix MLP: 32 x (41,943,040 + 176,160,768) + 536,870,912 = 7,516,192,768 MACs.
    assert flopmeter.FlopModel(configs / "apertus_8b.toml").coefficients["dense_per_token"] == 6 * 7_516_192_768


def test_a_config_json_dict_gives_the_shipped_toml_model(qwen3_vl_2b_config):
    from_dict = flopmeter.FlopModel(qwen3_vl_2b_config).coefficients
    from_toml = flopmeter.FlopModel("qwen3_vl_2b").coefficients
    for key in ("model", "file"):
        from_dict.pop(key, None)
        from_toml.pop(key, None)
    assert from_dict == from_toml


def test_a_config_json_file_and_its_checkpoint_directory_load(tmp_path, qwen3_vl_2b_config):
    (tmp_path / "config.json").write_text(json.dumps(qwen3_vl_2b_config))
    by_file = flopmeter.FlopModel(tmp_path / "config.json")
    by_dir = flopmeter.FlopModel(str(tmp_path))
    assert by_file.coefficients["dense_per_token"] == by_dir.coefficients["dense_per_token"] == 10322706432


def test_a_small_batch_by_hand():
    # tiny_vlm (model_configs/tiny_vlm.toml), documents of 3 and 5 tokens, 2 padding tokens, one image of
    # 1 x 4 x 4 patches (spatial_merge_size 2):
    #   device tokens 3 + 5 + 2 = 10; causal pairs 3*4/2 + 5*6/2 = 6 + 15 = 21;
    #   patches 16; merged tokens 16 / 4 = 4; ViT pairs per frame 1 x 16^2 = 256.
    m = flopmeter.FlopModel("tiny_vlm")
    c = m.coefficients
    assert m.counts(document_lengths=[3, 5], padding_tokens=2, grid_thw=[[1, 4, 4]]) == {
        "real_tokens": 8, "padding_tokens": 2, "documents": 2, "causal_pairs": 21, "items": 1, "patches": 16,
        "merged_tokens": 4, "vision_pairs_per_frame": 256, "vision_pairs_whole": 256,
        "window_pairs_0": 0, "window_pairs_1": 0,  # tiny_vlm attends fully on every layer: no window
        # Its ViT has no window blocks, no CLS token and no image blocks (tests/python/test_vlm_families.py).
        "vision_window_pairs": 0, "vision_cls_tokens": 0, "image_block_pairs": 0,
    }
    expected = (c["dense_per_token"] * 10 + c["text_attn_pair"] * 21 + c["vision_per_patch"] * 16
                + c["vision_attn_pair"] * 256 + c["patch_embed_per_patch"] * 16 + c["merger_per_merged_token"] * 4
                + c["mtp_per_token"] * 10 + c["mtp_attn_pair"] * 21)
    assert m.flops(document_lengths=[3, 5], padding_tokens=2, grid_thw=[[1, 4, 4]]) == expected
    # The seed scope: the reference's four terms, ViT attention over the whole item ((1*16)^2 = 256 here too).
    seed = c["dense_per_token"] * 10 + c["text_attn_pair"] * 21 + c["vision_per_patch"] * 16 + c["vision_attn_pair"] * 256
    assert m.flops(document_lengths=[3, 5], padding_tokens=2, grid_thw=[[1, 4, 4]], scope="seed") == seed


def test_gpt_oss_20b_windowed_batch_by_hand():
    # gpt_oss_20b (model_configs/gpt_oss_20b.toml): 24 layers alternating sliding (window 128) and full attention,
    # 64 heads of 64. Per pair and layer 6 * 2*64*64 = 49,152: 12 full layers 589,824, 12 sliding layers 589,824.
    # Documents of 1000 and 3000 tokens: causal pairs 500,500 + 4,501,500 = 5,002,000; pairs inside the window
    # 128*129/2 + (L - 128)*128: 8,256 + 111,616 = 119,872 and 8,256 + 367,616 = 375,872, together 495,744.
    # dense_per_token (hand-derived in tests/test_families.cpp's terms): 6 * (24*(2880*9216) + 24*2880*32
    # + 24*4*3*2880*2880 + 2880*201088) = 21,642,854,400.
    m = flopmeter.FlopModel("gpt_oss_20b")
    c = m.coefficients
    assert c["dense_per_token"] == 21642854400
    assert c["text_attn_pair"] == 589824 and c["window_attn_pair"] == [589824]
    assert c["windows"] == [{"kind": "sliding", "size": 128}]
    counts = m.counts(document_lengths=[1000, 3000])
    assert counts["causal_pairs"] == 5002000 and counts["window_pairs_0"] == 495744
    assert m.flops(document_lengths=[1000, 3000]) == 21642854400 * 4000 + 589824 * 5002000 + 589824 * 495744


def test_deepseek_v3_2_sparse_attention_by_hand():
    # deepseek_v3_2_exp (model_configs/deepseek_v3_2_exp.toml, model type deepseek_v32): 61 MLA layers whose core
    # (128 heads x (128 + 64 + 128) = 40,960 multiply-adds per pair, x6 x61 = 14,991,360) runs over the top 2048
    # keys of each query: a sliding window of 2048. The indexer (64 heads of 128) scores every causal pair forward
    # only: 2 x 61 x 64 x (128 + 1) = 1,007,232. Documents of 1000 (shorter than top-k) and 3000 tokens (longer):
    # top-k pairs 500,500 + (2048*2049/2 + 952*2048) = 500,500 + 4,047,872 = 4,548,372; causal 500,500 +
    # 4,501,500 = 5,002,000.
    m = flopmeter.FlopModel("deepseek_v3_2_exp")
    c = m.coefficients
    assert c["text_attn_pair"] == 1007232 and c["window_attn_pair"] == [14991360]
    assert c["windows"] == [{"kind": "sliding", "size": 2048}]
    counts = m.counts(document_lengths=[1000, 3000])
    assert counts["causal_pairs"] == 5002000 and counts["window_pairs_0"] == 4548372
    assert m.flops(document_lengths=[1000, 3000]) == (
        c["dense_per_token"] * 4000 + 1007232 * 5002000 + 14991360 * 4548372)


def test_meter_training_indexer_trains_bills_the_indexers_backward():
    # deepseek_v3_2_exp: with [training] indexer_trains the indexer's projections add their weight gradient (2 more
    # FLOPs per multiply-add: 2 x 61 x 13,959,168 = 1,703,018,496 per token) and its scores their backward (4 more:
    # 4 x 61 x 64 x 129 = 2,014,464 per causal pair). Documents of 3 and 5 tokens: 8 tokens, 6 + 15 = 21 pairs.
    def flops_seen(training):
        with flopmeter.Meter(model="deepseek_v3_2_exp", training=training, peak={"tflops_per_gpu": 1.0},
                             sinks={"console": False}) as meter:
            meter.on_microbatch(document_lengths=[3, 5], samples=2)
            meter.on_log(1)
            return meter.flush()["train/flops_seen"]
    assert flops_seen({"indexer_trains": True}) - flops_seen(None) == 1703018496 * 8 + 2014464 * 21


def test_llama4_scout_text_chunks_by_hand():
    # llama_4_scout_17b_16e_text (model type llama4_text): 36 RoPE layers attend inside chunks of 8192 (chunks
    # restart at each document), 12 NoPE layers fully; per pair and layer 6 * 40 * (128 + 128) = 61,440: chunked
    # 36 x that = 2,211,840, full 12 x that = 737,280. Documents of 8192 (one chunk) and 10000 tokens (a chunk and
    # 1808 more): chunk pairs 2 x 8192*8193/2 + 1808*1809/2 = 67,117,056 + 1,635,336 = 68,752,392; causal pairs
    # 33,558,528 + 50,005,000 = 83,563,528.
    m = flopmeter.FlopModel("llama_4_scout_17b_16e_text")
    c = m.coefficients
    assert c["text_attn_pair"] == 737280 and c["window_attn_pair"] == [2211840]
    assert c["windows"] == [{"kind": "chunked", "size": 8192}]
    counts = m.counts(document_lengths=[8192, 10000])
    assert counts["causal_pairs"] == 83563528 and counts["window_pairs_0"] == 68752392
    assert m.flops(document_lengths=[8192, 10000]) == (
        c["dense_per_token"] * 18192 + 737280 * 83563528 + 2211840 * 68752392)


def _python_counts(lengths, grids, merge):
    """The counts, computed here from their definitions (METRICS.md, section 1), independently of the library."""
    return {
        "real_tokens": sum(lengths), "documents": len(lengths), "causal_pairs": sum(L * (L + 1) // 2 for L in lengths),
        "items": len(grids), "patches": sum(t * h * w for t, h, w in grids),
        "merged_tokens": sum(t * h * w // (merge * merge) for t, h, w in grids),
        "vision_pairs_per_frame": sum(t * (h * w) ** 2 for t, h, w in grids),
        "vision_pairs_whole": sum((t * h * w) ** 2 for t, h, w in grids),
    }


@pytest.mark.parametrize("name", ["qwen3_vl_2b", "qwen3_vl_30b_a3b", "qwen3_5_9b", "qwen3_5_397b_a17b"])
def test_random_batches_equal_the_clis_estimate_and_an_independent_count(name):
    rng = random.Random(f"flops-{name}")
    m = flopmeter.FlopModel(name)
    c = m.coefficients
    merge = math.isqrt(c["patches_per_merged_token"])
    for _ in range(12):
        lengths = [rng.randint(0, 20000) for _ in range(rng.randint(1, 12))]
        grids = [(rng.randint(1, 4), merge * rng.randint(1, 40), merge * rng.randint(1, 40))
                 for _ in range(rng.randint(0, 5))]
        padding = rng.randint(0, 500)
        n = _python_counts(lengths, grids, merge)
        exact = (c["dense_per_token"] * (n["real_tokens"] + padding) + c["text_attn_pair"] * n["causal_pairs"]
                 + c["vision_per_patch"] * n["patches"] + c["vision_attn_pair"] * n["vision_pairs_per_frame"]
                 + c["patch_embed_per_patch"] * n["patches"] + c["merger_per_merged_token"] * n["merged_tokens"]
                 + c["mtp_per_token"] * (n["real_tokens"] + padding) + c["mtp_attn_pair"] * n["causal_pairs"])
        flops = m.flops(document_lengths=lengths, grid_thw=grids, padding_tokens=padding)
        assert flops == exact
        args = ["estimate", name, "--docs", ",".join(map(str, lengths)), "--padding", str(padding)]
        if grids:
            args += ["--images", ",".join(f"{t}x{h}x{w}" for t, h, w in grids)]
        cli = cli_json(*args)
        estimate = m.estimate(document_lengths=lengths, grid_thw=grids, padding_tokens=padding)
        assert estimate == cli
        # The CLI's JSON number is the double nearest the exact total.
        assert cli["flops"] == float(exact)


def test_flops_stay_exact_beyond_two_to_the_53():
    # 10 documents of 2^22 tokens in qwen3_vl_235b_a22b: the total is far above 2^53 (~9.0e15), where a double
    # would round; the int is the exact sum of coefficient x count.
    m = flopmeter.FlopModel("qwen3_vl_235b_a22b")
    c = m.coefficients
    L = 1 << 22
    lengths = [L] * 10
    exact = (c["dense_per_token"] + c["mtp_per_token"]) * 10 * L + (c["text_attn_pair"] + c["mtp_attn_pair"]) * 10 * (L * (L + 1) // 2)
    flops = m.flops(document_lengths=lengths)
    assert flops == exact and flops > 2**53
    assert float(flops) == m.estimate(document_lengths=lengths)["flops"]


def test_every_input_form_gives_the_same_counts():
    import numpy as np
    import torch

    m = flopmeter.FlopModel("qwen3_vl_2b")
    lengths = [5, 0, 7, 3]
    cu = [0, 5, 5, 12, 15]
    positions = [0, 1, 2, 3, 4] + [0, 1, 2, 3, 4, 5, 6] + [0, 1, 2]  # the empty document has no positions
    grids = [[1, 4, 6], [2, 2, 2]]
    reference = m.counts(document_lengths=lengths, grid_thw=grids)
    forms = [
        dict(cu_seqlens=cu), dict(cu_seqlens=np.array(cu)), dict(cu_seqlens=torch.tensor(cu)),
        dict(cu_seqlens=torch.tensor(cu, dtype=torch.int32)), dict(cu_seqlens=np.array(cu, dtype=np.uint16)),
        dict(document_lengths=torch.tensor(lengths)), dict(document_lengths=tuple(lengths)),
        dict(cu_seqlens=torch.tensor([9] + cu)[1:]),  # a view with an offset
        dict(cu_seqlens=torch.tensor(cu).repeat_interleave(2)[::2]),  # non-contiguous
    ]
    for form in forms:
        got = m.counts(grid_thw=torch.tensor(grids), **form)
        assert got == reference, form
    by_positions = m.counts(position_ids=torch.tensor(positions), grid_thw=np.array(grids))
    assert by_positions == dict(reference, documents=3)  # positions cannot show an empty document
    by_int32 = m.counts(position_ids=torch.tensor(positions, dtype=torch.int32), grid_thw=grids)
    assert by_int32 == by_positions


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(cu_seqlens=[0.0, 3.0]), TypeError, "cu_seqlens must hold ints"),
    (dict(cu_seqlens=[0, True]), TypeError, "cu_seqlens must hold ints"),
    (dict(document_lengths=[3, -1]), ValueError, "invalid micro-batch"),
    (dict(cu_seqlens=[0, 5, 3]), ValueError, "invalid micro-batch"),
    (dict(position_ids=[0, 1, 3]), ValueError, "invalid micro-batch"),
    (dict(cu_seqlens=[0, 3], document_lengths=[3]), ValueError, "give one of"),
    (dict(cu_seqlens="0,3"), TypeError, "cu_seqlens must be a torch tensor, a NumPy array or a sequence of ints"),
    (dict(grid_thw=[[1, 3, 4]]), ValueError, "invalid micro-batch"),
    (dict(grid_thw=[[1, 4]]), ValueError, "grid_thw must have shape [items, 3]"),
    (dict(padding_tokens=-1), ValueError, "padding_tokens must be >= 0"),
    (dict(padding_tokens=1.5), TypeError, "padding_tokens must be an int"),
])
def test_bad_batches_raise_naming_the_argument(kwargs, error, words):
    with pytest.raises(error, match=None) as info:
        flopmeter.FlopModel("qwen3_vl_2b").flops(**kwargs)
    assert words in str(info.value)


def test_tensor_argument_errors_name_the_argument_and_the_shape():
    import numpy as np
    import torch

    m = flopmeter.FlopModel("qwen3_vl_2b")
    with pytest.raises(ValueError, match=r"cu_seqlens must be 1-D, got shape \(1, 3\)"):
        m.flops(cu_seqlens=torch.tensor([[0, 2, 5]]))
    with pytest.raises(TypeError, match="cu_seqlens must have an integer dtype, got torch.float32"):
        m.flops(cu_seqlens=torch.tensor([0.0, 2.0]))
    with pytest.raises(TypeError, match="position_ids must have an integer dtype, got torch.bool"):
        m.flops(position_ids=torch.tensor([True, False]))
    with pytest.raises(TypeError, match="document_lengths must have an integer dtype, got float64"):
        m.flops(document_lengths=np.array([1.0]))
    with pytest.raises(ValueError, match="grid_thw must have shape \\[items, 3\\], got shape \\(3,\\)"):
        m.flops(document_lengths=[1], grid_thw=torch.tensor([1, 2, 2]))
    with pytest.raises(TypeError):
        m.flops(cu_seqlen=[0, 1])  # an unknown keyword
    with pytest.raises(ValueError, match="scope must be 'complete' or 'seed'"):
        m.flops(document_lengths=[1], scope="all")


def test_model_errors_are_config_errors_with_file_line_col(tmp_path, qwen3_vl_2b_config):
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nname = "x"\nmodel_type = "qwen3_vl"\n\n[text_config]\nhidden_size = -4\n')
    with pytest.raises(flopmeter.ConfigError) as info:
        flopmeter.FlopModel(bad)
    assert str(bad) + ":" in str(info.value)
    assert isinstance(info.value, ValueError)
    qwen3_vl_2b_config["text_config"]["hidden_size"] = 0
    with pytest.raises(flopmeter.ConfigError, match=r"<dict>:\d+:\d+: .*hidden_size"):
        flopmeter.FlopModel(qwen3_vl_2b_config)
    with pytest.raises(flopmeter.ConfigError, match="not a shipped config name"):
        flopmeter.FlopModel("qwen9_vl_1t")
    with pytest.raises(TypeError):
        flopmeter.FlopModel(42)


def test_check_passes_over_the_shipped_configs(shipped):
    result = flopmeter.check()
    assert result["pass"] is True
    # One report per shipped model and row length (4096, 8192, 32768 by default).
    assert len(result["reports"]) == 3 * len(shipped)
    assert {r["model"] for r in result["reports"]} >= {"qwen3_vl_2b", "qwen3_5_9b"}
    one = flopmeter.check(["tiny_vlm"], seq_lens=[100])
    assert [r["seq_len"] for r in one["reports"]] == [100] and one["pass"]


def test_check_runs_in_this_process_and_gives_the_clis_reports(monkeypatch):
    expected = cli_json("check", "tiny_vlm", "qwen3_vl_2b", "--seq-len", "100", "--seq-len", "4096")
    # The tool is not needed: a check that still ran it as a subprocess would fail here.
    monkeypatch.setenv("FLOPMETER_CLI", "/nonexistent/flopmeter")
    result = flopmeter.check(["tiny_vlm", "qwen3_vl_2b"], seq_lens=[100, 4096])
    assert result["reports"] == expected and result["pass"] is True
    # S(S+1)/2 pairs of S = 2^32 tokens no longer fit 64 bits (the largest seq_len is 2^32 - 1).
    with pytest.raises(ValueError, match=r"seq_lens: check of tiny_vlm at S=4294967296: seq_len 4294967296 is too "
                                         r"large"):
        flopmeter.check(["tiny_vlm"], seq_lens=[2**32])
    with pytest.raises(ValueError, match="seq_lens must hold ints >= 1, got 0"):
        flopmeter.check(["tiny_vlm"], seq_lens=[0])
    with pytest.raises(flopmeter.ConfigError, match="not a shipped config name"):
        flopmeter.check(["qwen9_vl_1t"])


def test_image_grid_thw_is_the_deprecated_name_of_grid_thw():
    # One 3-token and one 5-token document with a 1 x 4 x 4 item: the same counts and FLOPs by either name, a
    # FutureWarning at the caller's line for the old one, and a TypeError for both at once.
    model = flopmeter.FlopModel("tiny_vlm")
    with pytest.warns(FutureWarning, match="write grid_thw=") as caught:
        old = model.flops(document_lengths=[3, 5], image_grid_thw=[[1, 4, 4]])
    assert caught[0].filename == __file__
    assert old == model.flops(document_lengths=[3, 5], grid_thw=[[1, 4, 4]])
    assert model.counts(document_lengths=[3, 5], grid_thw=[[1, 4, 4]])["patches"] == 16
    with pytest.raises(TypeError, match="give grid_thw or its deprecated name image_grid_thw, not both"):
        model.counts(grid_thw=[[1, 4, 4]], image_grid_thw=[[1, 4, 4]])
    with flopmeter.Meter(model="tiny_vlm", sinks={"console": False}) as meter:
        with pytest.warns(FutureWarning) as caught:
            assert meter.on_microbatch(document_lengths=[3, 5], image_grid_thw=[[1, 4, 4]], samples=1)
        assert caught[0].filename == __file__
        with pytest.raises(TypeError, match="not both"):
            meter.on_microbatch(document_lengths=[3], grid_thw=[[1, 4, 4]], image_grid_thw=[[1, 4, 4]])
        meter.on_log(1)
        record = meter.flush()
    assert record["train/flops_seen"] == old  # the item was counted


def test_python_m_flopmeter_runs_the_cli():
    done = run_cli("coefficients", "qwen3_vl_2b")
    assert done.returncode == 0 and "10,322,706,432" in done.stdout
    assert run_cli("no-such-command").returncode == 2


@pytest.mark.parametrize("regime, flags", [
    ({"frozen": "vision"}, ["--frozen", "vision"]),
    ({"frozen": ["vision", "text"]}, ["--frozen", "vision,text"]),
    ({"frozen": ["vision", "merger"], "lora_rank": 8, "lora_targets": ["q_proj", "v_proj"]},
     ["--frozen", "vision,merger", "--lora-rank", "8", "--lora-targets", "q_proj,v_proj"]),
])
def test_a_training_regime_equals_the_clis_and_its_coefficients(regime, flags):
    m = flopmeter.FlopModel("qwen3_vl_2b", **regime)
    c = m.coefficients
    assert c == cli_json("coefficients", "qwen3_vl_2b", *flags)
    full = flopmeter.FlopModel("qwen3_vl_2b")
    lengths, grids = [700, 300], [(1, 16, 16)]
    n = _python_counts(lengths, grids, 2)
    # A micro-batch with an image is billed with the regime's coefficients, term by term.
    exact = (c["dense_per_token"] * n["real_tokens"] + c["text_attn_pair"] * n["causal_pairs"]
             + c["vision_per_patch"] * n["patches"] + c["vision_attn_pair"] * n["vision_pairs_per_frame"]
             + c["patch_embed_per_patch"] * n["patches"] + c["merger_per_merged_token"] * n["merged_tokens"])
    assert m.flops(document_lengths=lengths, grid_thw=grids) == exact
    assert exact < full.flops(document_lengths=lengths, grid_thw=grids)
    args = ["estimate", "qwen3_vl_2b", "--docs", "700,300", "--images", "1x16x16", *flags]
    assert m.estimate(document_lengths=lengths, grid_thw=grids) == cli_json(*args)


def test_a_meters_model_is_in_the_meters_regime():
    with flopmeter.Meter(model="qwen3_vl_2b", frozen=["vision"], peak={"tflops_per_gpu": 1.0},
                         sinks={"console": False}) as meter:
        assert meter.model.coefficients == flopmeter.FlopModel("qwen3_vl_2b", frozen="vision").coefficients


@pytest.mark.parametrize("kwargs, error, words", [
    ({"frozen": "decoder"}, ValueError, "frozen[0] must be one of"),
    ({"frozen": ["vision", "vision"]}, ValueError, "twice"),
    ({"lora_rank": -1}, ValueError, "lora_rank must be >= 0"),
    ({"lora_rank": 8, "lora_targets": "q_proj"}, TypeError, "not a str"),
    ({"lora_rank": 8, "lora_targets": ["q_proj", "qkv"]}, ValueError, "lora_targets[1]"),
    ({"frozen": ["vision", "merger", "text"]}, ValueError, "nothing trains"),
])
def test_a_bad_regime_raises_naming_the_argument(kwargs, error, words):
    with pytest.raises(error) as e:
        flopmeter.FlopModel("qwen3_vl_2b", **kwargs)
    assert words in str(e.value)


@pytest.mark.parametrize("recompute, flags", [
    ("full", ["--recompute", "full"]),
    ("full_early_stop", ["--recompute", "full_early_stop"]),
    ({"policy": "op", "every": 2}, ["--recompute", "op", "--recompute-every", "2"]),
    ({"policy": "selective", "layers": 4}, ["--recompute", "selective", "--recompute-layers", "4"]),
])
def test_recompute_equals_the_clis_and_changes_no_model_flop(recompute, flags):
    m = flopmeter.FlopModel("qwen3_8b", recompute=recompute)
    assert m.coefficients == cli_json("coefficients", "qwen3_8b", *flags)
    lengths = [1000, 3000]
    report = m.estimate(document_lengths=lengths)
    assert report == cli_json("estimate", "qwen3_8b", "--docs", "1000,3000", *flags)
    # Recomputation runs some forwards again: hardware FLOPs only. The model FLOPs (MFU's) stay those of the
    # model without it.
    assert m.flops(document_lengths=lengths) == flopmeter.FlopModel("qwen3_8b").flops(document_lengths=lengths)
    assert report["hardware_flops"] > report["flops"]


def test_full_recompute_by_hand_reruns_a_third_of_every_decoder_layer():
    # Qwen3-8B, documents of 1000 and 3000 tokens, everything trains. Under "full" every decoder layer's forward
    # runs once more in the backward: each of its GEMMs and its attention core, billed 6 per multiply-add in the
    # model FLOPs (forward 2, backward 4), gets 2 more, a third. The LM head (hidden 4096 -> vocab 151936) lies
    # outside the layers and runs once: 6 x 4096 x 151936 FLOPs per token over 4000 tokens.
    # So hardware - model = (model - LM head) / 3.
    lengths = [1000, 3000]
    model = flopmeter.FlopModel("qwen3_8b").flops(document_lengths=lengths)
    lm_head = 6 * 4096 * 151936 * 4000
    report = flopmeter.FlopModel("qwen3_8b", recompute="full").estimate(document_lengths=lengths)
    assert (model - lm_head) % 3 == 0
    assert report["hardware_flops"] == pytest.approx(model + (model - lm_head) // 3, rel=1e-15)


@pytest.mark.parametrize("recompute, error, words", [
    ("sometimes", ValueError, "recompute_policy"),
    ({"every": 2}, ValueError, "needs 'policy'"),
    ({"policy": "full", "often": 2}, ValueError, "unknown key 'often'"),
    ({"policy": "full", "layers": 2, "every": 2}, ValueError, "both set"),
    ({"policy": "full", "every": -1}, ValueError, "recompute['every'] must be >= 0"),
    ({"policy": "full", "vision": 1}, TypeError, "recompute['vision'] must be a bool"),
    (3, TypeError, "recompute must be a policy name or a dict"),
])
def test_a_bad_recompute_raises_naming_the_argument(recompute, error, words):
    with pytest.raises(error) as e:
        flopmeter.FlopModel("qwen3_8b", recompute=recompute)
    assert words in str(e.value)
