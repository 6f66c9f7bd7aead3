#!/usr/bin/env python3
"""The soak's cost check: what each hook costs in the last tenth of a long run against the first tenth, in
instructions counted by valgrind's callgrind.

An instruction count does not move with the machine's load, so this check holds on a shared 2-core CI machine
where CPU time per call does not (a fresh-clone CI run saw the CPU time per on_microbatch of every rank rise by
50% at once, and the next run by 1-5%, with no trend inside either). bench/soak.py still reports CPU time, for
the 4-rank long form run by hand. What an instruction count catches is what a long run would show: a hook
whose work grows with the calls or logs so far (a container that grows, a scan over history, a leak the
allocator pays for).

The run is bench/soak_cost.c, under valgrind: the C ABI over the library the Python package installs (built
without LibTorch, so valgrind starts in seconds), one process, the JSONL and TensorBoard sinks on, LOGS logs
of MICROBATCHES micro-batches each, one refused micro-batch in every 97 and one skipped log in every 1,000.
callgrind's counters are zeroed as each window (the first and the last tenth of the logs) starts and dumped
as it ends (client requests), so each dump holds that window's calls alone; both windows make the same calls,
and their instructions per micro-batch (the logs' share included) are compared. The same program also runs
once natively for the memory half: resident memory, threads and open descriptors at the end of the first
tenth and at the end, flopmeter alone in the process.

    python3 bench/soak_cost.py [--logs 2000] [--microbatches-per-log 20] [--python PYTHON]

PYTHON must import the installed flopmeter package (scripts/test_python.sh's venv; by default the interpreter
running this). Prints one JSON line. Exits 1 when instructions per micro-batch grew by more than --limit
(1.10), RSS by more than --rss-limit-kib (1 MiB), or threads or descriptors at all; 2 when it cannot measure
(valgrind missing: Debian's valgrind).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build_driver(python: str, scratch: Path) -> Path:
    """bench/soak_cost.c compiled against c_api.h and linked to the library `python`'s flopmeter package
    loads (built without LibTorch)."""
    library = subprocess.run([python, "-c", "import flopmeter._native as n; print(n.library_path())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise RuntimeError("no C compiler (Debian: build-essential)")
    # c_api.h includes the generated flopmeter/export.h; a caller of the library only needs its macro to exist.
    (scratch / "flopmeter").mkdir()
    (scratch / "flopmeter" / "export.h").write_text("#define FLOPMETER_EXPORT\n")
    driver = scratch / "soak_cost"
    subprocess.run([compiler, "-std=c99", "-O2", "-Wall", "-Werror", f"-I{scratch}", f"-I{REPO / 'include'}",
                    str(REPO / "bench" / "soak_cost.c"), "-o", str(driver), library,
                    f"-Wl,-rpath,{Path(library).parent}"], check=True)
    return driver


def window_cost(dump: Path) -> int:
    """The instructions of one dump: its "totals:" line (or "summary:" in older formats)."""
    for line in dump.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logs", type=int, default=2000)
    parser.add_argument("--microbatches-per-log", type=int, default=20)
    parser.add_argument("--limit", type=float, default=1.10, help="instructions per micro-batch, last/first")
    parser.add_argument("--rss-limit-kib", type=int, default=1024, help="resident memory growth, first tenth to end")
    parser.add_argument("--python", default=sys.executable, help="an interpreter that imports flopmeter")
    args = parser.parse_args()
    if args.logs < 10 or args.microbatches_per_log < 1:
        parser.error("--logs must be >= 10 and --microbatches-per-log >= 1")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("soak_cost: valgrind not found (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="flopmeter-soak-cost-") as scratch:
        scratch = Path(scratch)
        driver = build_driver(args.python, scratch)
        plugin = scratch / "soak.toml"
        plugin.write_text(f"""[model]
config = "{REPO / 'model_configs' / 'qwen3_vl_2b.toml'}"
[peak]
gpu = "H100 SXM"
[sinks]
console = false
jsonl = "{scratch / 'soak.jsonl'}"
tensorboard = "{scratch / 'tensorboard'}"
""")
        # Memory, threads and descriptors: the same run natively (valgrind's allocator would be measured
        # instead of the process's). Then the instructions, under callgrind.
        native = subprocess.run([str(driver), str(args.logs), str(args.microbatches_per_log), str(plugin)],
                                capture_output=True, text=True, timeout=3000)
        if native.returncode != 0:
            print(native.stdout + native.stderr, file=sys.stderr)
            return 2
        footprint = json.loads(native.stdout.strip().splitlines()[-1])
        (scratch / "soak.jsonl").unlink()  # the callgrind run writes its own records
        shutil.rmtree(scratch / "tensorboard")
        out = scratch / "callgrind.out"
        run = subprocess.run([valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no",
                              str(driver), str(args.logs), str(args.microbatches_per_log), str(plugin)],
                             capture_output=True, text=True, timeout=3000)
        if run.returncode != 0:
            print(run.stdout + run.stderr, file=sys.stderr)
            return 2
        report = json.loads(run.stdout.strip().splitlines()[-1])
        windows = {}
        for dump in scratch.glob("callgrind.out.*"):
            trigger = re.search(r"^desc: Trigger: Client Request: (\w+)$", dump.read_text(), re.M)
            if trigger:
                windows[trigger.group(1)] = window_cost(dump)
        records = sum(1 for _ in (scratch / "soak.jsonl").open())
    if set(windows) != {"first", "last"}:
        print(f"soak_cost: expected callgrind's dumps 'first' and 'last', found {sorted(windows)}", file=sys.stderr)
        return 2
    # A window's instructions per micro-batch: its hooks' work (and the loop's few instructions around them),
    # over the same number of micro-batches and logs in both windows.
    first, last = (windows[w] / report["calls"][w]["on_microbatch"] for w in ("first", "last"))
    ratio = last / first
    rss_growth_kib = footprint["rss_kib"][1] - footprint["rss_kib"][0]
    verdict = {"run": report, "records_written": records,
               "instructions_per_microbatch": {"first": round(first, 1), "last": round(last, 1)},
               "last_over_first": round(ratio, 4), "limit": args.limit,
               "native": {key: footprint[key] for key in ("rss_kib", "threads", "fds")},
               "rss_growth_kib": rss_growth_kib,
               "flat": ratio <= args.limit and rss_growth_kib <= args.rss_limit_kib and
               footprint["threads"][1] <= footprint["threads"][0] and footprint["fds"][1] <= footprint["fds"][0]}
    print(json.dumps(verdict))
    return 0 if verdict["flat"] else 1


if __name__ == "__main__":
    sys.exit(main())
