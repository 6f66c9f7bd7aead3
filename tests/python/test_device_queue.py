"""The device micro-batches' copy queue (flopmeter/_device_queue.py) on fake events: the order entries are counted
in, what a poll and a drain count, back-pressure on a full queue, and a bounded wait for an event that fires late,
out of order or never; then the Meter's device path with such events (CPU tensors, no GPU needed).

A fake clock advances only when the queue sleeps, so the waits take no real time.
"""

from __future__ import annotations

import logging

import pytest

import flopmeter
from flopmeter import _batch, _device_path, _device_queue

QUIET = {"console": False}


class FakeEvent:
    """Fires once `polls` queries have answered False (0: at once; None: never)."""

    def __init__(self, polls=0):
        self.left = polls

    def query(self) -> bool:
        if self.left is None:
            return False
        if self.left == 0:
            return True
        self.left -= 1
        return False


class Harness:
    def __init__(self, capacity=8, wait_seconds=1.0):
        self.counted, self.given_up, self.now, self.slept = [], [], 0.0, 0.0
        self.queue = _device_queue.CopyQueue(self.counted.append, lambda p, w: self.given_up.append((p, w)),
                                             capacity=capacity, wait_seconds=wait_seconds, clock=lambda: self.now,
                                             sleep=self._sleep)

    def _sleep(self, seconds):
        self.slept += seconds
        self.now += seconds


def test_a_poll_counts_the_arrived_head_in_order_and_stops_at_the_first_in_flight():
    h = Harness()
    for polls, payload in ((0, 1), (0, 2), (5, 3), (0, 4)):
        h.queue.put(FakeEvent(polls), payload)
    assert h.queue.poll() == 2
    assert h.counted == [1, 2] and len(h.queue) == 2
    assert h.slept == 0  # a poll never waits


def test_a_drain_waits_for_late_entries_and_counts_out_of_order_ones_meanwhile():
    h = Harness()
    h.queue.put(FakeEvent(3), 1)  # late: three queries say no
    h.queue.put(FakeEvent(0), 2)  # arrived before the head
    h.queue.put(FakeEvent(1), 3)
    assert h.queue.drain() == 3
    assert h.counted == [2, 3, 1] and len(h.queue) == 0 and h.given_up == []
    assert 0 < h.slept < 1.0


def test_an_event_that_never_fires_is_given_up_after_the_bound_and_never_waited_for_again():
    h = Harness(wait_seconds=0.5)
    h.queue.put(FakeEvent(0), 1)
    h.queue.put(FakeEvent(None), 2)
    h.queue.put(FakeEvent(2), 3)
    assert h.queue.drain() == 2
    assert h.counted == [1, 3] and h.given_up == [(2, 0.5)] and h.queue.given_up == 1
    # Bounded: the fake clock passed 0.5 s by at most one pause (1 ms).
    assert 0.5 <= h.slept <= 0.5 + 1e-3
    before = h.slept
    assert h.queue.drain() == 0 and h.slept == before


def test_one_drain_waits_at_most_its_bound_in_all_however_many_never_fire():
    h = Harness(wait_seconds=0.25)
    for i in range(5):
        h.queue.put(FakeEvent(None), i)
    assert h.queue.drain() == 0
    assert [p for p, _ in h.given_up] == [0, 1, 2, 3, 4]
    assert h.slept <= 0.25 + 1e-3  # one deadline for the whole drain


def test_a_full_queue_counts_what_arrived_then_waits_for_its_oldest():
    h = Harness(capacity=2)
    h.queue.put(FakeEvent(4), 1)
    h.queue.put(FakeEvent(0), 2)
    h.queue.put(FakeEvent(0), 3)  # full, head in flight: waits for 1 (2 is counted meanwhile)
    assert h.counted == [2, 1] and len(h.queue) == 1 and h.slept > 0
    h.queue.put(FakeEvent(0), 4)
    before = h.slept
    h.queue.put(FakeEvent(0), 5)  # full of arrived entries: the poll makes room, no wait
    assert h.slept == before and h.counted == [2, 1, 3, 4]
    r = Harness(capacity=1, wait_seconds=0.1)
    r.queue.put(FakeEvent(None), 10)
    r.queue.put(FakeEvent(0), 11)  # the oldest never arrives: given up after the bound, then 11 is queued
    assert r.given_up == [(10, 0.1)] and len(r.queue) == 1


def test_bad_arguments_of_the_queue_are_refused_naming_them():
    with pytest.raises(ValueError, match="capacity must be >= 1, got 0"):
        _device_queue.CopyQueue(print, print, capacity=0)
    with pytest.raises(ValueError, match="wait_seconds must be >= 0, got -1"):
        _device_queue.CopyQueue(print, print, wait_seconds=-1)


@pytest.fixture
def delayed_events(monkeypatch):
    """The Meter's device path for CPU tensors, with copies whose events the test fires: a list of FakeEvents,
    one per queued micro-batch, all in flight until the test sets .left = 0."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(_batch, "is_device_tensor", lambda value: _batch._is_torch_tensor(value))
    monkeypatch.setattr(_batch, "FAST_PATH", False)
    events = []
    original = _device_queue.copy_to_host

    def copy_with_a_late_event(*args, **kwargs):
        _, entry = original(*args, **kwargs)
        events.append(FakeEvent(None))
        return events[-1], entry

    monkeypatch.setattr(_device_queue, "copy_to_host", copy_with_a_late_event)
    return torch, events


def test_device_microbatches_are_counted_in_their_own_interval_when_their_copies_arrive(delayed_events):
    # Interval 1: two batches of 10 and 20 tokens whose copies arrive only after on_microbatch returned (the
    # second one after a host micro-batch of 5 tokens came); interval 2: one of 30 tokens. Every micro-batch
    # belongs to the interval it ran in: tokens_seen 35, then 65.
    torch, events = delayed_events
    with flopmeter.Meter(model="tiny_vlm", sinks=QUIET) as meter:
        assert meter.on_microbatch(cu_seqlens=torch.tensor([0, 10]), samples=1)
        assert meter.on_microbatch(cu_seqlens=torch.tensor([0, 20]), samples=1)
        assert len(meter._device.queue) == 2  # both in flight
        events[0].left = 0
        assert meter.on_microbatch(cu_seqlens=[0, 5], samples=1)  # a hook: the first copy is counted
        assert len(meter._device.queue) == 1
        events[1].left = 2  # arrives while on_log waits for it
        assert meter.on_log(1) is None
        assert len(meter._device.queue) == 0
        assert meter.on_microbatch(cu_seqlens=torch.tensor([0, 30]), samples=1)
        events[2].left = 0
        first = meter.on_log(2)
        last = meter.flush()
        health = meter.health
    assert first["step"] == 1 and first["train/tokens_seen"] == 35 and first["train/num_samples"] == 3
    assert last["step"] == 2 and last["train/tokens_seen"] == 65
    assert health["bad_microbatches"] == 0 and health["lost_device_microbatches"] == 0


def test_a_copy_that_never_arrives_costs_one_bounded_wait_and_is_reported(delayed_events, caplog):
    torch, events = delayed_events
    with caplog.at_level(logging.WARNING, logger="flopmeter"):
        with flopmeter.Meter(model="tiny_vlm", sinks=QUIET) as meter:
            meter._device = _device_path.DeviceMicrobatches(torch.device("cpu"), meter._count_host,
                                                            wait_seconds=0.05)
            assert meter.on_microbatch(cu_seqlens=torch.tensor([0, 10]), samples=1)  # never arrives
            assert meter.on_microbatch(cu_seqlens=torch.tensor([0, 20]), samples=1)
            events[1].left = 0
            meter.on_log(1)
            record = meter.flush()
            health = meter.health
    assert record["train/tokens_seen"] == 20  # the lost one counts nothing, the other is counted
    assert health["lost_device_microbatches"] == 1 and health["bad_microbatches"] == 0
    assert any("did not arrive within 0.05 s" in r.getMessage() for r in caplog.records)


def test_a_device_microbatch_refused_on_arrival_is_logged_with_the_host_paths_reason(delayed_events, caplog):
    torch, events = delayed_events
    with caplog.at_level(logging.WARNING, logger="flopmeter"):
        with flopmeter.Meter(model="tiny_vlm", sinks=QUIET) as meter:
            assert meter.on_microbatch(cu_seqlens=torch.tensor([0, 10]), loss_sum=1.0,
                                       label_tokens=torch.tensor(1000))
            events[0].left = 0
            meter.on_log(1)
            health = meter.health
        with pytest.raises(ValueError) as host:
            with flopmeter.Meter(model="tiny_vlm", sinks=QUIET) as on_host:
                on_host.on_microbatch(cu_seqlens=[0, 10], loss_sum=1.0, label_tokens=1000)
    assert health["bad_microbatches"] == 1
    reasons = [r.getMessage() for r in caplog.records if "a micro-batch on cpu" in r.getMessage()]
    assert len(reasons) == 1 and str(host.value) in reasons[0], reasons


def test_a_tensor_that_cannot_be_copied_to_the_host_is_refused_naming_it(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(_batch, "FAST_PATH", False)
    with flopmeter.Meter(model="tiny_vlm", sinks=QUIET) as meter:
        with pytest.raises(ValueError, match=r"^cu_seqlens: tensors on meta cannot be copied to the host"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 5], device="meta"))
        assert meter.on_microbatch(cu_seqlens=[0, 5])
        meter.on_log(1)
        assert meter.flush()["train/tokens_seen"] == 5
