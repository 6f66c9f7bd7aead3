"""Activation recomputation from Python: Meter(recompute=...), and the proof by execution.

torch.utils.checkpoint runs on the Python example's blocks (examples/python/train_vlm.py, every decoder layer and
ViT block), and a dispatch-mode counter measures the matmul FLOPs torch executes, forward and backward, with and
without checkpointing. The difference is the recomputed forward. It must equal what flopmeter bills as
recomputed (``flopmeter estimate --recompute POLICY --json``'s ``recompute`` terms), and the record's hardware
figure must carry it: perf/tflops_per_second_hardware / perf/tflops_per_second = hardware / model FLOPs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from conftest import cli_json

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import flopmeter  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "python" / "train_vlm.py"
MODEL_TOML = ROOT / "examples" / "python" / "tiny_vl.toml"


def _load_example():
    spec = importlib.util.spec_from_file_location("train_vlm_recompute", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class MatmulCounter(TorchDispatchMode):
    """FLOPs of every aten matmul torch dispatches (2 per multiply-add): the projections (mm, addmm) apart from
    the attention cores (bmm). Any other matmul-like op is recorded as unknown (the test fails on it)."""

    def __init__(self) -> None:
        super().__init__()
        self.projections = 0
        self.cores = 0
        self.unknown = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name == "mm":
            (m, k), n = args[0].shape, args[1].shape[1]
            self.projections += 2 * m * k * n
        elif name == "addmm":
            (m, k), n = args[1].shape, args[2].shape[1]
            self.projections += 2 * m * k * n
        elif name == "bmm":
            (b, m, k), n = args[0].shape, args[1].shape[2]
            self.cores += 2 * b * m * k * n
        elif any(part in name for part in ("mm", "mv", "dot", "matmul", "linear", "conv")):
            self.unknown.add(name)
        return func(*args, **(kwargs or {}))


def _run(example, config, row, checkpoint):
    """Matmul FLOPs of one training micro-batch (forward + backward) of the example with fixed weights."""
    torch.manual_seed(7)
    model = example.TinyVLM(config, checkpoint=checkpoint, checkpoint_vision=checkpoint is not None)
    counter = MatmulCounter()
    with counter:
        model(row).backward()
    assert not counter.unknown, f"matmul-like ops this counter does not count ran: {sorted(counter.unknown)}"
    return counter


def _row_arguments(row):
    docs = [int(b - a) for a, b in zip(row["cu_seqlens"][:-1], row["cu_seqlens"][1:])]
    images = [f"{t}x{h}x{w}" for t, h, w in row["image_grid_thw"].tolist()]
    return docs, images


@pytest.mark.parametrize("checkpoint", ["reentrant", "non_reentrant"])
def test_checkpointed_blocks_run_again_exactly_the_forward_flopmeter_bills(checkpoint):
    """reentrant: "full"; non_reentrant: "full_early_stop" where torch stops early (>= 2.1). Torch 1.13's
    non-reentrant checkpoint fails under a dispatch mode (its saved-tensor hooks hand the mode a float), so there
    that case is skipped; its reentrant one runs."""
    example = _load_example()
    if checkpoint == "non_reentrant" and not example.checkpoint_early_stop_available():
        pytest.skip("torch 1.13's non-reentrant checkpoint does not run under a TorchDispatchMode")
    config = example.load_model_config(MODEL_TOML)
    row = example.make_row(config, seed=1234, rank=0, k=0)  # template 0: documents 40, 56, 32; two images
    plain = _run(example, config, row, None)
    checkpointed = _run(example, config, row, checkpoint)
    policy = example.recompute_policy(checkpoint == "reentrant")
    docs, images = _row_arguments(row)
    estimate = cli_json("estimate", str(MODEL_TOML), "--docs", ",".join(map(str, docs)), "--images",
                        ",".join(images), "--recompute", policy, "--recompute-vision")
    recomputed = estimate["recompute"]
    assert recomputed["settings"]["policy"] == policy
    # Projections and MLPs: the executed difference is exactly the billed recomputed dense work.
    assert checkpointed.projections - plain.projections == recomputed["text_dense"] + recomputed["vision_dense"]
    # Attention cores: the example computes the masked square (every (query, key) of the row, every patch pair of
    # the item list), flopmeter bills causal pairs and pairs per temporal patch (examples/FLOP_AGREEMENT.md):
    # per-pair coefficient x square.
    counts = estimate["counts"]
    n = sum(docs) + row["padding_tokens"]
    patches = counts["patches"]
    text_per_pair = recomputed["text_attention"] // counts["causal_pairs"]
    vision_per_pair = recomputed["vision_attention"] // counts["vision_pairs_per_frame"]
    assert text_per_pair * counts["causal_pairs"] == recomputed["text_attention"]
    assert vision_per_pair * counts["vision_pairs_per_frame"] == recomputed["vision_attention"]
    assert checkpointed.cores - plain.cores == text_per_pair * n * n + vision_per_pair * patches * patches
    assert recomputed["total"] > 0

    # The record: Meter(recompute=...) reports hardware / model FLOPs = (flops + recomputed) / flops.
    with flopmeter.Meter(model=str(MODEL_TOML), peak={"tflops_per_gpu": 1000.0}, sinks={"console": False},
                         recompute={"policy": policy, "vision": True}) as meter:
        meter.on_microbatch(cu_seqlens=row["cu_seqlens"], grid_thw=row["image_grid_thw"],
                            padding_tokens=row["padding_tokens"], samples=row["samples"])
        meter.on_log(1)
        record = meter.flush()
    ratio = record["perf/tflops_per_second_hardware"] / record["perf/tflops_per_second"]
    assert ratio == pytest.approx(estimate["hardware_flops"] / estimate["flops"], rel=1e-12)
    assert estimate["hardware_flops"] == estimate["flops"] + recomputed["total"]
    assert record["perf/hfu"] / record["perf/mfu"] == pytest.approx(ratio, rel=1e-12)


def test_without_recompute_the_hardware_figures_equal_the_model_ones():
    with flopmeter.Meter(model=str(MODEL_TOML), peak={"tflops_per_gpu": 1000.0}, sinks={"console": False}) as meter:
        meter.on_microbatch(cu_seqlens=[0, 40, 96], samples=2)
        meter.on_log(1)
        record = meter.flush()
    assert record["perf/tflops_per_second_hardware"] == record["perf/tflops_per_second"]
    assert record["perf/hfu"] == record["perf/mfu"]


@pytest.mark.parametrize("recompute, error, words", [
    (3, TypeError, "recompute must be a policy name or a dict, got int"),
    ({"policy": "full", "stride": 2}, ValueError, "recompute: unknown key 'stride'"),
    ({"layers": 2}, ValueError, "recompute: the dict needs 'policy'"),
    ("block", flopmeter.ConfigError, "unknown recompute policy 'block'"),
    ({"policy": "full", "every": 99}, flopmeter.ConfigError, "training.recompute_every = 99 checkpoints no layer"),
])
def test_bad_recompute_arguments_say_what_is_wrong(recompute, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        flopmeter.Meter(model=str(MODEL_TOML), sinks={"console": False}, recompute=recompute)
