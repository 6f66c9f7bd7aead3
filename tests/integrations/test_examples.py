"""examples/trl_sft/train.py runs in 2 processes and its logs carry flopmeter's figures."""

from __future__ import annotations

from conftest import REPO, read_json, run_torchrun


def test_the_trl_sft_example_in_two_processes(tmp_path):
    out = tmp_path / "out"
    outputs = run_torchrun(REPO / "examples" / "trl_sft" / "train.py", ["--output-dir", str(out), "--rows", "24"], 2,
                           tmp_path)
    history = read_json(out / "log_history.json")
    records = [e for e in history if "flopmeter/step" in e]
    assert records, history
    # 24 rows of 8 to 96 tokens, 12 per process; every one of them counted once, over both processes.
    assert 24 * 8 <= records[-1]["train/tokens_seen"] <= 24 * 96
    assert records[-1]["train/num_samples"] == 24
    assert 0 < records[-1]["train/batch_efficiency"] < 1  # the pad_to_multiple_of tail is padding
    assert records[-1]["perf/mfu"] > 0
    assert "last log:" in outputs[0]


def test_the_watch_loop_example_in_two_processes(tmp_path):
    import importlib.util
    import json

    import flopmeter

    script = REPO / "examples" / "python" / "watch_loop.py"
    outputs = run_torchrun(script, ["--steps", "4", "--accumulation", "2", "--log-every", "2"], 2, tmp_path)
    records = [json.loads(line.split(" ", 1)[1]) for line in outputs[0].splitlines() if line.startswith("record ")]
    assert [r["step"] for r in records] == [2, 4]
    assert all(r["train/microbatches_per_step"] == 2 for r in records)
    # Expected: each rank's 8 training micro-batches (the example's own data function, seeded by the rank), each
    # billed by the FlopModel of the example's model config; the evaluation batches are not counted.
    spec = importlib.util.spec_from_file_location("watch_loop", script)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    reference = flopmeter.FlopModel(example.tiny_model().config.to_dict())
    expected, tokens = 0, 0
    for rank in range(2):
        for batch in example.batches(seed=rank, count=8):
            lengths = batch["attention_mask"].sum(dim=1).tolist()
            expected += reference.flops(document_lengths=lengths,
                                        padding_tokens=batch["attention_mask"].numel() - sum(lengths))
            tokens += sum(lengths)
    assert records[-1]["train/flops_seen"] == expected
    assert records[-1]["train/tokens_seen"] == tokens
