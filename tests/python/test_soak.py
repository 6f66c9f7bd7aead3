"""The soak benchmark's short form (bench/soak.py): 4 Gloo ranks through Meter with the JSONL and TensorBoard
sinks, invalid micro-batches and a skipped on_log; the process compared with itself, first part against last.
The long form is run by hand; its command is in bench/soak.py."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO


def test_a_long_run_stays_flat_in_memory_descriptors_threads_and_cost():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "soak.py"), "--logs", "3000", "--report-every", "300"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = json.loads(done.stdout.strip().splitlines()[-1])["soak"]
    assert len(verdicts) == 4
    for rank, v in enumerate(verdicts):
        assert v["rss_growth_kib"] <= 1024, (rank, v)     # RSS within 1 MiB from the first tenth to the end
        assert v["fds"][1] <= v["fds"][0], (rank, v)      # no descriptor is leaked per log or per record
        assert v["threads"][1] <= v["threads"][0], (rank, v)
        # The per-call cost is reported (bench/soak.py prints last/first ratios), not asserted here: in runs of
        # this short form on this shared 2-core machine the CPU time per on_microbatch of every rank at once rose
        # by 50% in one run and by 1-5% in the next, with no trend inside either: the machine, not flopmeter.
        # The 10% goal is judged on the long form (100,000 logs), run by hand (bench/soak.py).


def test_the_hooks_cost_as_many_instructions_and_as_much_memory_late_in_a_long_run_as_early():
    """The per-call cost half of the soak, made deterministic: bench/soak_cost.py runs 20,000 logs of 20
    micro-batches (400,000 micro-batches, a refused one in every 97, one skipped log in every 1,000, the JSONL
    and TensorBoard sinks on) through the C ABI under valgrind's callgrind, and compares the instructions per
    micro-batch (the logs' share included) of the last tenth with the first. An instruction count does not
    move with the machine's load; a hook whose work grew with the run would. Expected: within 10%."""
    done = subprocess.run([sys.executable, str(REPO / "bench" / "soak_cost.py"), "--logs", "20000",
                           "--microbatches-per-log", "20"], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads(done.stdout.strip().splitlines()[-1])
    run = verdict["run"]
    # The windows are the first and last 2,000 logs: each has 40,000 micro-batches and 1,998 logs (the logs
    # numbered 500 and 1,500 from each window's start are skipped), so the two are the same work.
    assert run["calls"]["first"] == run["calls"]["last"] == {"on_microbatch": 40000, "on_log": 1998}, run
    assert run["bad_microbatches"] == 400000 // 97, run  # every 97th refused and counted, no other
    assert run["dropped_records"] == 0, run
    assert verdict["records_written"] == 20000 - 20, verdict  # one record per log made (the last by flush)
    assert verdict["last_over_first"] <= 1.10, verdict
    # The memory half, from the same program run natively (flopmeter alone in the process): resident memory
    # within 1 MiB from the end of the first tenth to the end, and no thread or descriptor more.
    native = verdict["native"]
    assert native["rss_kib"][1] - native["rss_kib"][0] <= 1024, native
    assert native["threads"][1] <= native["threads"][0] and native["fds"][1] <= native["fds"][0], native
    assert verdict["flat"], verdict
