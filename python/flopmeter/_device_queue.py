"""Micro-batches whose index arrays live on a device: copied to the host, counted there when they arrive.

A micro-batch given as tensors on a CUDA device is not counted on the device. ``copy_to_host`` enqueues
``non_blocking`` copies of its index arrays (cu_seqlens or document lengths or position_ids, the grid_thw
rows, and the loss sum and label count when they are tensors) into pinned host memory on the current stream,
then records a CUDA event after them; nothing waits. ``CopyQueue`` holds such entries in the order they came;
the Meter counts an entry with the library's one host counter (the same call as a host micro-batch) once its
event has fired.

When entries are counted:
- at every hook (``poll``): the entries at the head of the queue whose event has fired, in order; the first
  one still in flight stops the poll (one ``query`` per hook when nothing has arrived: copies on one stream
  arrive in order);
- at ``on_log`` and ``flush`` (``drain``): every entry, since they belong to the interval that ends. An entry
  whose copy is still in flight is waited for by polling its event (``query`` and a short sleep, never
  ``synchronize``), so the wait is bounded: an entry that has not arrived ``wait_seconds`` after the drain
  began is given up (``give_up``: the Meter counts it as a micro-batch that ran without counts, with a
  warning), and a later drain never waits for it again. An event that never fires costs one bounded wait,
  never a hang;
- back-pressure: a queue that holds ``capacity`` entries when one more comes first counts what has arrived;
  if it is still full it waits for its oldest entry as a drain would (bounded likewise, and giving it up after
  the bound). A trainer whose host runs that many micro-batches ahead of its device waits for the device there.

The event interface is two methods: ``query() -> bool`` (fired?, never blocks) and nothing else; the tests use
fake events that fire late, out of order or never.

Thread-safety: none of its own; the Meter calls it under its lock.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Callable, Deque, Optional, Tuple

# Entries the queue holds before a new one waits for the oldest (back-pressure); far more than a host runs ahead
# of its device in a training step (each micro-batch's forward and backward launch thousands of kernels).
DEFAULT_CAPACITY = 1024
# How long a drain waits for copies still in flight before giving them up (a device that has not finished a copy
# of a few kilobytes in this time is not making progress).
DEFAULT_WAIT_SECONDS = 60.0
# The polling of an event while waiting: from the first sleep up to the longest, doubling.
_FIRST_SLEEP_S = 20e-6
_LONGEST_SLEEP_S = 1e-3


class CopyQueue:
    """In-flight micro-batches, counted in arrival order by ``count(payload)``; ``give_up(payload, waited_s)``
    for one whose event did not fire within the bound."""

    def __init__(self, count: Callable[[Any], None], give_up: Callable[[Any, float], None], *,
                 capacity: int = DEFAULT_CAPACITY, wait_seconds: float = DEFAULT_WAIT_SECONDS,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if not wait_seconds >= 0:
            raise ValueError(f"wait_seconds must be >= 0, got {wait_seconds}")
        self._count = count
        self._give_up = give_up
        self.capacity = capacity
        self.wait_seconds = wait_seconds
        self._clock = clock
        self._sleep = sleep
        self._entries: Deque[Tuple[Any, Any]] = collections.deque()  # (event, payload), oldest first
        self.given_up = 0  # entries given up so far

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, event: Any, payload: Any) -> None:
        """Queues one entry; when the queue is full, first makes room (see the module's back-pressure)."""
        if len(self._entries) >= self.capacity:
            self.poll()
            if len(self._entries) >= self.capacity:
                self._settle_oldest(self._clock() + self.wait_seconds)
        self._entries.append((event, payload))

    def poll(self) -> int:
        """Counts the entries at the head whose event has fired; returns how many."""
        counted = 0
        entries = self._entries
        while entries and entries[0][0].query():
            self._count(entries.popleft()[1])
            counted += 1
        return counted

    def drain(self) -> int:
        """Counts every entry, waiting up to wait_seconds (in all) for those in flight and giving up the ones
        still in flight after it; returns how many were counted. The queue is empty afterwards."""
        counted = 0
        deadline = self._clock() + self.wait_seconds
        while self._entries:
            counted += self._settle_oldest(deadline)
        return counted

    def _settle_oldest(self, deadline: float) -> int:
        """Counts the oldest entry once its event fires, or gives it up when the deadline passes first; fired
        entries behind it are counted while it is waited for (their events may fire out of order). Returns how
        many were counted."""
        event, payload = self._entries[0]
        counted = 0
        pause = _FIRST_SLEEP_S
        while not event.query():
            counted += self._count_fired_behind_head()
            if self._clock() >= deadline:
                self._entries.popleft()
                self.given_up += 1
                self._give_up(payload, self.wait_seconds)
                return counted
            self._sleep(pause)
            pause = min(2 * pause, _LONGEST_SLEEP_S)
        self._entries.popleft()
        self._count(payload)
        return counted + 1

    def _count_fired_behind_head(self) -> int:
        """Counts the entries after the head whose event has fired, keeping the others in order."""
        if len(self._entries) < 2:
            return 0
        head = self._entries.popleft()
        kept: Deque[Tuple[Any, Any]] = collections.deque([head])
        counted = 0
        for event, payload in self._entries:
            if event.query():
                self._count(payload)
                counted += 1
            else:
                kept.append((event, payload))
        self._entries = kept
        return counted


class ArrivedEvent:
    """The event of a copy that is complete when it is made (a tensor already in host memory)."""

    __slots__ = ()

    def query(self) -> bool:
        return True


class DeviceBatch:
    """One micro-batch's arrays in host memory (pinned for CUDA copies; filled once its event fires) and its
    host-known arguments."""

    __slots__ = ("fmt", "batch", "grids", "loss_sum", "label_tokens", "padding_tokens", "samples", "device")

    def __init__(self, fmt: Optional[str], batch: Any, grids: Any, loss_sum: Any, label_tokens: Any,
                 padding_tokens: int, samples: int, device: Any) -> None:
        self.fmt = fmt
        self.batch = batch
        self.grids = grids
        self.loss_sum = loss_sum
        self.label_tokens = label_tokens
        self.padding_tokens = padding_tokens
        self.samples = samples
        self.device = device


def _to_host(torch: Any, t: Any, dtype: Any, pinned: bool) -> Any:
    """A host tensor that will hold `t` as `dtype` once the current stream reaches this point: a non_blocking
    copy into pinned memory for a CUDA tensor (the conversion, when one is needed, runs on the device first);
    otherwise the tensor itself (a host tensor) or a plain copy."""
    source = t if t.dtype == dtype else t.to(dtype)  # on the device: an asynchronous kernel
    if not pinned:
        return source.to("cpu").contiguous()
    host = torch.empty(tuple(source.shape), dtype=dtype, pin_memory=True)
    host.copy_(source, non_blocking=True)
    return host


def copy_to_host(torch: Any, device: Any, fmt: Optional[str], batch: Any, grids: Any, loss_sum: Any,
                 label_tokens: Any, padding_tokens: int, samples: int) -> Tuple[Any, DeviceBatch]:
    """(event, DeviceBatch): the batch's tensors copied towards the host, and the event after the copies.

    position_ids keep an int32 dtype (the host counter takes it); every other array becomes int64. A loss sum
    on the device becomes a float64 element, a label count an int64 one; Python numbers stay as they are.
    """
    pinned = device.type == "cuda"
    host_batch = None
    if batch is not None:
        dtype = torch.int32 if fmt == "position_ids" and batch.dtype == torch.int32 else torch.int64
        host_batch = _to_host(torch, batch, dtype, pinned)
    host_grids = None if grids is None else _to_host(torch, grids, torch.int64, pinned)
    is_tensor = torch.is_tensor
    host_loss = _to_host(torch, loss_sum.reshape(1), torch.float64, pinned) if is_tensor(loss_sum) else loss_sum
    host_labels = (_to_host(torch, label_tokens.reshape(1), torch.int64, pinned) if is_tensor(label_tokens)
                   else label_tokens)
    if pinned:
        event: Any = torch.cuda.Event()
        event.record(torch.cuda.current_stream(device))  # the stream the copies were enqueued on, after them
    else:
        event = ArrivedEvent()
    return event, DeviceBatch(fmt, host_batch, host_grids, host_loss, host_labels, padding_tokens, samples,
                              device)
