"""Meter over torch.distributed: real Gloo jobs of several processes (tests/python/dist_worker.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flopmeter

from dist_worker import REPLICA_BATCHES

WORKER = Path(__file__).with_name("dist_worker.py")
LOCAL = ("perf/log_wait_ms", "perf/log_emit_ms")


def run_job(tmp_path: Path, scenario: str, world: int, logs_out=None, worker: Path = WORKER, timeout: float = 120):
    """Runs `world` processes of `worker` (SCENARIO RANK WORLD INIT_FILE OUT_FILE) and returns each one's JSON."""
    init = tmp_path / "init"
    outs = [tmp_path / f"rank{r}.json" for r in range(world)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(worker), scenario, str(r), str(world), str(init), str(outs[r])],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            logs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} failed:\n{logs[r]}"
    if logs_out is not None:
        logs_out.extend(logs)
    return [json.loads(o.read_text()) for o in outs]


def test_dp2_tp2_job_headlines_by_hand(tmp_path):
    ranks = run_job(tmp_path, "dp2_tp2", 4)
    m = flopmeter.FlopModel("tiny_vlm")
    # Per interval, each replica's work (every tp rank passes its replica's whole micro-batches):
    #   replica 0: real tokens 300 + 250 = 550, padding 6, samples 3, loss 50 over 25 labels, 2 micro-batches
    #   replica 1: real tokens 64 + 512 + 3 = 579, padding 61, samples 7, loss 13 over 43 labels, 3 micro-batches
    real = {0: 550, 1: 579}
    padding = {0: 6, 1: 61}
    flops = {r: sum(m.flops(**{k: v for k, v in b.items() if k in ("cu_seqlens", "grid_thw", "padding_tokens")})
                    for b in REPLICA_BATCHES[r]) for r in (0, 1)}
    microbatches = {0: 2, 1: 3}
    for b in REPLICA_BATCHES[0]:
        assert b["cu_seqlens"][-1] in (300, 250)
    # Every rank emits (emit = "all") the same records, health counters aside.
    steps = sorted(int(s) for s in ranks[0]["records"])
    assert steps == [1, 2, 3, 4]
    for rank in ranks:
        assert rank["health"]["bad_microbatches"] == 0 and rank["health"]["failed_collectives"] == 0
        for step in map(str, steps):
            mine, ref = (
                {k: v for k, v in records[step].items() if not k.startswith("health/") and k not in LOCAL}
                for records in (rank["records"], ranks[0]["records"]))
            assert mine == ref
    for step in map(str, steps):
        rec = ranks[0]["records"][step]
        k = int(step)
        # Cumulative DP sums: each replica counted once, not once per tp rank.
        assert rec["train/tokens_seen"] == k * (550 + 579)
        assert rec["train/num_samples"] == k * (3 + 7)
        # train/loss = sum(loss_sum) / sum(label_tokens) over the DP group: (50 + 13) / (25 + 43).
        assert rec["train/loss"] == pytest.approx(63 / 68, rel=1e-15)
        # Batch efficiency: real / (real + padding) over the DP group: 1129 / 1196.
        assert rec["train/batch_efficiency"] == pytest.approx(1129 / 1196, rel=1e-15)
        # Each rank's interval t_r is its step time x its micro-batches (perf_topk lists all 4 ranks).
        t = {}
        for side in ("slow", "fast"):
            for i in range(4):
                r = int(rec[f"perf_topk/step_time_{side}_{i}_rank"])
                t[r] = rec[f"perf_topk/step_time_{side}_{i}"] * microbatches[r // 2]
        assert sorted(t) == [0, 1, 2, 3]
        # perf/tokens_per_second = sum over ranks of real_r / (tp*cp*pp) / t_r (METRICS.md): each replica's
        # tokens are split over its 2 tp ranks.
        tps = sum(real[r // 2] / 2 / t[r] for r in range(4))
        assert rec["perf/tokens_per_second"] == pytest.approx(tps, rel=1e-9)
        assert rec["perf/tokens_per_second_per_gpu"] == pytest.approx(tps / 4, rel=1e-9)
        # perf/tflops_per_second = sum over r of flops_r / (tp*cp*pp) / t_r / 1e12, divided by the world of 4:
        # each tp rank does half of its replica's FLOPs (tp = 2, cp = pp = 1).
        tflops = sum(flops[r // 2] / 2 / t[r] for r in range(4)) / 1e12 / 4
        assert rec["perf/tflops_per_second"] == pytest.approx(tflops, rel=1e-9)
        assert rec["perf/mfu"] == pytest.approx(rec["perf/tflops_per_second"] / 1000.0 * 100, rel=1e-12)
        # perf/step_time: the mean over ranks of t_r / microbatches_r.
        assert rec["perf/step_time"] == pytest.approx(sum(t[r] / microbatches[r // 2] for r in range(4)) / 4, rel=1e-9)


@pytest.mark.parametrize("scenario", ["skip_one_log", "skip_one_log_log_depth"])
def test_a_rank_that_skips_one_log_costs_the_intervals_around_it_then_all_are_back_in_step(tmp_path, scenario):
    # skip_one_log: the table at every log (Gloo's all-reduce); skip_one_log_log_depth: only ordinary logs, each
    # one log-depth all-reduce of send/recv. Messages pair by order either way, so the cost is the same.
    ranks = run_job(tmp_path, scenario, 2)
    # 2 ranks: "automatic" (skip_one_log) keeps Gloo's ring below 4 ranks; the other forces the log-depth one.
    assert {r["algorithm"] for r in ranks} == {"log_depth" if scenario.endswith("_log_depth") else "backend"}
    lost = {}
    for rank in ranks:
        steps = sorted(int(s) for s in rank["records"])
        lost[rank["rank"]] = sorted(set(range(1, 9)) - set(steps))
        assert rank["health"]["out_of_step_intervals"] == 1, rank["health"]
        assert steps[-3:] == [6, 7, 8]  # back in step: the last intervals are all there
    assert lost[0] == lost[1]  # every rank decides alike, from the same rows
    # Rank 1 never logged step 4, so no record of step 4 can exist; its row of step 5 went into the collective
    # that rank 0 started at step 4, which every rank discards as out of step (the rows disagree). Rank 0's
    # step-5 interval then has no partner left, so the skip costs the intervals of steps 4 and 5, on every rank
    # alike, and reporting resumes at step 6.
    assert lost[0] == [4, 5], lost
    # The running totals keep every interval: rank 0 ran 10 tokens and rank 1 20 per step, 8 steps.
    assert ranks[0]["records"]["8"]["train/tokens_seen"] == 8 * (10 + 20)


def test_a_process_group_smaller_than_the_job_is_refused(tmp_path):
    ranks = run_job(tmp_path, "small_group", 3)
    assert "spans 2 of the job's 3 ranks" in ranks[0]["error"]
    assert "spans 2 of the job's 3 ranks" in ranks[1]["error"]
    assert "spans 1 of the job's 3 ranks" in ranks[2]["error"]
    # A group over the whole world is taken as it is.
    assert [r["whole_world"] for r in ranks] == [[0, 3], [1, 3], [2, 3]]


def test_ranks_that_train_different_parts_are_refused_and_named(tmp_path):
    logs = []
    ranks = run_job(tmp_path, "different_training", 3, logs_out=logs)
    for rank in ranks:
        # No interval is emitted while the ranks differ: 3 logs and the flush, none delivered.
        assert rank["records"] == {}, rank["records"]
        assert rank["health"]["config_mismatch_intervals"] >= 3, rank["health"]
    # Each emitting rank names the rank that differs and how (ranks 0 and 2 freeze the ViT, rank 1 does not).
    for log in logs:
        assert "rank 1: [training] all trains, the others frozen vision" in log, log
        assert "rank 1: model" not in log, log  # the same model: only the regime is named


def test_waiting_for_a_late_peer_sleeps_instead_of_polling(tmp_path):
    # Rank 1 joins the collective of step 1 about 1.5 s late, so rank 0's on_log(2) blocks about that long for
    # it. The wait is Work.wait(timeout) on the work's condition variable: rank 0's thread sleeps. Measured
    # before (a 0.2 ms sleep loop over Work.is_completed()): about 0.1 s of CPU per second waited on this
    # machine; after: a few ms in all, whatever the wait. A bound of 2% of the wall time separates the two
    # with room for a loaded machine.
    ranks = run_job(tmp_path, "slow_peer", 2)
    waiter = ranks[0]
    assert waiter["wait_wall_s"] > 0.5, waiter  # it really waited for rank 1
    assert waiter["wait_cpu_s"] < 0.02 * waiter["wait_wall_s"], waiter
    assert waiter["records"]["1"]["perf/log_wait_ms"] > 500
    for rank in ranks:
        assert rank["health"]["failed_collectives"] == 0


def test_ordinary_logs_reduce_a_fixed_size_and_the_table_comes_every_third_log(tmp_path):
    # The job of test_dp2_tp2_job_headlines_by_hand with logging.topk_interval_logs = 3: logs 1, 2 and 4 run the
    # Python adapter's SUM and MAX all-reduce (fixed size), log 3 gathers the table. Every record carries the
    # same hand-derived DP sums; only log 3's carries perf_topk/*.
    ranks = run_job(tmp_path, "dp2_tp2_reduced", 4)
    for rank in ranks:
        # 4 ranks of the Meter's own Gloo group: small_allreduce="automatic" picks the log-depth collectives
        # (log 3's table by the recursive-doubling all-gather).
        assert rank["algorithm"] == "log_depth"
        assert rank["health"]["failed_collectives"] == 0 and rank["health"]["skipped_intervals"] == 0
        assert sorted(int(s) for s in rank["records"]) == [1, 2, 3, 4]
        for step, rec in rank["records"].items():
            k = int(step)
            assert rec["train/tokens_seen"] == k * (550 + 579)
            assert rec["train/num_samples"] == k * (3 + 7)
            assert rec["train/loss"] == pytest.approx(63 / 68, rel=1e-15)
            assert rec["train/batch_efficiency"] == pytest.approx(1129 / 1196, rel=1e-15)
            assert rec["train/max_loss"] == pytest.approx(50 / 25, rel=1e-15)  # replica 0: 2.0, replica 1: 13/43
            topk = [key for key in rec if key.startswith("perf_topk/")]
            assert bool(topk) == (k == 3), (step, topk)
            # tokens/s is the sum of each rank's share over its own interval: positive, finite.
            assert rec["perf/tokens_per_second"] > 0


def test_the_log_depth_collectives_and_gloos_rings_give_the_same_records(tmp_path):
    # The job above twice: logs by the log-depth collectives (automatic at 4 ranks) and by Gloo's rings
    # (small_allreduce="backend"). Every DP sum is an integer or a ratio of integer sums, so both orders of
    # addition give the same figures: the records agree key for key, timings and health aside.
    for name in ("log_depth", "ring"):
        (tmp_path / name).mkdir()
    doubling = run_job(tmp_path / "log_depth", "dp2_tp2_reduced", 4)
    ring = run_job(tmp_path / "ring", "dp2_tp2_reduced_backend", 4)
    assert {r["algorithm"] for r in ring} == {"backend"}
    exact = ("train/tokens_seen", "train/num_samples", "train/loss", "train/batch_efficiency", "train/max_loss")
    for a, b in zip(doubling, ring):
        assert sorted(a["records"]) == sorted(b["records"]) == ["1", "2", "3", "4"]
        for step in a["records"]:
            for key in exact:
                assert a["records"][step][key] == b["records"][step][key], (step, key)
            assert sorted(a["records"][step]) == sorted(b["records"][step])
