"""flopmeter.integrations.lightning.FlopmeterCallback on the real pytorch-lightning Trainer, one process and two
(DDP over Gloo, CPU). Expected values are derived from the batches each rank's collator made."""

from __future__ import annotations

import pytest

import flopmeter
import lightning_job
import tiny
from conftest import HERE, read_json, run_torchrun


def flopmeter_metrics(metrics):
    return [m for m in metrics if "flopmeter/step" in m]


def test_one_process(tmp_path):
    lightning_job.run(tmp_path, 1)
    result = read_json(tmp_path / "rank0.json")
    batches = result["batches"]
    assert len(batches) == 4  # 12 rows, 3 per batch; 2 batches per optimizer step: steps 1 and 2
    records = flopmeter_metrics(result["metrics"])
    assert [m["flopmeter/step"] for m in records] == [1, 2]
    real = [sum(b["documents"]) for b in batches]
    assert [m["train/tokens_seen"] for m in records] == [real[0] + real[1], sum(real)]
    # train/flops_seen: the exact FLOPs of the batches so far. The first record went through pl_module.log_dict,
    # whose tensors are float32; the last, flushed at the end, straight to the loggers: exact.
    flops = tiny.expected_flops(flopmeter.FlopModel(result["config"]), batches)
    assert records[0]["train/flops_seen"] == pytest.approx(flops[0] + flops[1], rel=1e-6)
    assert records[-1]["train/flops_seen"] == sum(flops)
    assert records[-1]["train/num_samples"] == 12
    slots = sum(b["slots"] for b in batches[2:])
    assert records[-1]["train/batch_efficiency"] == pytest.approx((real[2] + real[3]) / slots)
    assert records[0]["perf/mfu"] > 0 and records[0]["perf/fwd_bwd_time"] > 0
    assert result["health"]["bad_microbatches"] == 0


def test_two_processes_ddp_over_gloo(tmp_path):
    run_torchrun(HERE / "lightning_job.py", [str(tmp_path), "2"], 2, tmp_path)
    ranks = [read_json(tmp_path / f"rank{r}.json") for r in range(2)]
    records = flopmeter_metrics(ranks[0]["metrics"])
    real = sum(sum(b["documents"]) for r in ranks for b in r["batches"])
    assert records[-1]["train/tokens_seen"] == real
    assert records[-1]["train/num_samples"] == 12
    model = flopmeter.FlopModel(ranks[0]["config"])
    assert records[-1]["train/flops_seen"] == sum(sum(tiny.expected_flops(model, r["batches"])) for r in ranks)
    assert flopmeter_metrics(ranks[1]["metrics"]) == []  # emitted on rank 0 only
