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
