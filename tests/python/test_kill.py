"""Nothing lost, nothing torn, when the trainer is SIGKILLed at any moment (METRICS.md, "When things go wrong":
each record is one write(2) of a whole line or event, not fsynced: it survives a process kill, not a power cut).

A writer (kill_writer.py) is killed at a random moment, 100 times, appending to one JSONL file and writing a new
TensorBoard event file per run. Linux can stop a write(2) to a file between two pages when the process gets
SIGKILL, so the last record of a run may be torn. After each kill: every record the writer reported as
returned by on_log is whole in both files; a torn JSONL line is the last line, and the next run starts on a
fresh line after it, so a reader loses only that record; a torn event is the end of its run's own file, and
every whole event before it reads back (with CRCs checked here, and with TensorBoard's own reader when it is
installed)."""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

WRITER = Path(__file__).with_name("kill_writer.py")
# 100 kills at random moments: each is a fresh interpreter, ~0.5 s to start on the CI machine (200 took 112 s of the
# suite).
KILLS = 100


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecords(path: Path):
    """The records of an event file (TFRecord framing: length, its masked CRC-32C, data, its masked CRC-32C),
    checked here independently of TensorBoard. Returns (payloads, bytes left after the last whole record)."""
    data = path.read_bytes()
    payloads, at = [], 0
    while len(data) - at >= 12:
        (length,) = struct.unpack_from("<Q", data, at)
        (length_crc,) = struct.unpack_from("<I", data, at + 8)
        assert length_crc == masked(crc32c(data[at:at + 8])), f"{path}: a corrupt length at byte {at}"
        if len(data) - at < 12 + length + 4:
            break
        payload = data[at + 12:at + 12 + length]
        (payload_crc,) = struct.unpack_from("<I", data, at + 12 + length)
        assert payload_crc == masked(crc32c(payload)), f"{path}: a corrupt record at byte {at}"
        payloads.append(payload)
        at += 12 + length + 4
    return payloads, len(data) - at


def scalar_steps(payloads):
    """The steps of the Event protos (field 2, int64 step; varint), without a protobuf library."""
    steps = []
    for p in payloads:
        i, step = 0, None
        while i < len(p):
            key = p[i]
            i += 1
            field, wire = key >> 3, key & 7
            if wire == 0:
                value, shift = 0, 0
                while True:
                    b = p[i]
                    i += 1
                    value |= (b & 0x7F) << shift
                    shift += 7
                    if not b & 0x80:
                        break
                if field == 2:
                    step = value
            elif wire == 1:
                i += 8
            elif wire == 2:
                length, shift = 0, 0
                while True:
                    b = p[i]
                    i += 1
                    length |= (b & 0x7F) << shift
                    shift += 7
                    if not b & 0x80:
                        break
                i += length
            elif wire == 5:
                i += 4
            else:
                raise AssertionError(f"wire type {wire}")
        steps.append(step)
    return steps


def test_a_writer_killed_at_any_moment_leaves_whole_records(tmp_path):
    rng = random.Random(20261201)
    jsonl = tmp_path / "metrics.jsonl"
    tensorboard = tmp_path / "tb"
    reported_total = torn_lines = torn_events = 0
    previous_torn = False
    for kill in range(KILLS):
        offset = jsonl.stat().st_size if jsonl.exists() else 0
        before = set(tensorboard.glob("events.out.tfevents.*")) if tensorboard.exists() else set()
        writer = subprocess.Popen([sys.executable, str(WRITER), str(jsonl), str(tensorboard)],
                                  stdout=subprocess.PIPE, text=True)
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.05))
        writer.send_signal(signal.SIGKILL)
        out, _ = writer.communicate(timeout=30)
        assert writer.returncode == -signal.SIGKILL
        reported = [int(line) for line in out.split()]
        reported_total += len(reported)
        # JSONL: this run's lines start on a fresh line; all are whole JSON objects but perhaps the last.
        text = jsonl.read_bytes() if jsonl.exists() else b""
        if previous_torn and len(text) > offset:
            assert text[offset:offset + 1] == b"\n", f"kill {kill}: the run after a torn line did not start afresh"
        run_lines = [line for line in text[offset:].split(b"\n") if line]
        if run_lines:  # a run killed before its first record leaves the file as it was
            previous_torn = not text.endswith(b"\n")
            if previous_torn:
                torn_lines += 1
                assert run_lines[-1].startswith(b'{"step":'), f"kill {kill}: a torn line that is not a record's start"
                run_lines = run_lines[:-1]
        steps = [json.loads(line)["step"] for line in run_lines]
        assert steps == sorted(steps) and set(reported) <= set(steps), f"kill {kill}: {reported} not in {steps}"
        # TensorBoard: this run's event file holds whole records (and at most one torn one at its end), and
        # every reported step.
        new = sorted(set(tensorboard.glob("events.out.tfevents.*")) - before)
        assert len(new) == 1, f"kill {kill}: {new}"
        payloads, torn = tfrecords(new[0])
        torn_events += torn > 0
        assert set(reported) <= set(scalar_steps(payloads[1:])), f"kill {kill}"  # [0] is the file_version event
    # Over all the runs, every line of the file is one JSON object but the torn ones, one per torn run at most.
    lines = jsonl.read_text().splitlines()
    broken = 0
    for line in lines:
        try:
            assert isinstance(json.loads(line), dict)
        except json.JSONDecodeError:
            broken += 1
    assert broken == torn_lines
    assert reported_total > 0 and len(lines) - broken >= reported_total
    print(f"{KILLS} kills: {reported_total} reported records, {torn_lines} torn JSONL lines, {torn_events} torn events")


def test_tensorboards_own_reader_reads_the_killed_writers_files(tmp_path):
    reader = os.environ.get("FLOPMETER_TENSORBOARD_PYTHON")
    if not reader or not Path(reader).exists():
        pytest.skip("no python with tensorboard (FLOPMETER_TENSORBOARD_PYTHON; scripts/test_python.sh sets it)")
    jsonl, tensorboard = tmp_path / "m.jsonl", tmp_path / "tb"
    for delay in (0.0, 0.01, 0.03):
        writer = subprocess.Popen([sys.executable, str(WRITER), str(jsonl), str(tensorboard)],
                                  stdout=subprocess.PIPE, text=True)
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.communicate(timeout=30)
    script = (
        "import glob, sys\n"
        "from tensorboard.backend.event_processing.event_file_loader import EventFileLoader\n"
        "for path in sorted(glob.glob(sys.argv[1] + '/events.out.tfevents.*')):\n"
        "    print(path, sum(1 for _ in EventFileLoader(path).Load()))\n")
    done = subprocess.run([reader, "-c", script, str(tensorboard)], capture_output=True, text=True, check=True)
    counts = [int(line.split()[1]) for line in done.stdout.splitlines()]
    assert len(counts) == 3 and all(c >= 1 for c in counts), done.stdout + done.stderr
    for path, count in zip(sorted(tensorboard.glob("events.out.tfevents.*")), counts):
        assert count == len(tfrecords(path)[0])  # TensorBoard reads every whole record this test counts
