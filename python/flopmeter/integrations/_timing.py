"""Forward-backward and data timing for the integrations, without a device synchronisation per micro-batch.

On CUDA a pair of events brackets each timed span on the current stream; the pairs are read when the interval
closes (at the log, where the trainer has synchronised for its own loss figure already). On the host
``time.perf_counter`` is read around the span.

Thread-safety: one instance per trainer, used from its training thread.
"""

from __future__ import annotations

import sys
import time
from typing import Any, List, Optional, Tuple


class SpanTimer:
    """The sum of the spans timed since the last ``take()``, in seconds."""

    def __init__(self) -> None:
        self._host_seconds = 0.0
        self._events: List[Tuple[Any, Any]] = []
        self._timed = False

    def start(self, device: Any = None) -> Any:
        """Starts a span on `device` (a torch.device, or None for the host); returns the token for ``stop``."""
        torch = sys.modules.get("torch")
        if torch is not None and device is not None and getattr(device, "type", None) == "cuda" and \
                torch.cuda.is_available():
            begin = torch.cuda.Event(enable_timing=True)
            begin.record()
            return begin
        return time.perf_counter()

    def stop(self, token: Any) -> None:
        self._timed = True
        if isinstance(token, float):
            self._host_seconds += time.perf_counter() - token
            return
        import torch

        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self._events.append((token, end))

    def add_host_seconds(self, seconds: float) -> None:
        self._timed = True
        self._host_seconds += seconds

    def take(self) -> Optional[float]:
        """The interval's seconds (None when nothing was timed), and a fresh interval."""
        if not self._timed:
            return None
        seconds = self._host_seconds
        if self._events:
            self._events[-1][1].synchronize()  # the last span's end: every earlier one has ended too
            seconds += sum(begin.elapsed_time(end) for begin, end in self._events) / 1000.0
        self._host_seconds = 0.0
        self._events = []
        self._timed = False
        return seconds


class Clock:
    """Points in time taken without a device synchronisation: a recorded CUDA event on the current stream when
    `cuda` (the span between two is the device's time between the work queued before each), else
    ``time.perf_counter()``. ``seconds(a, b)`` reads a span; on CUDA it waits for `b`, so a caller reads a span
    one log after its end was marked, when the device has long passed it."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        if cuda:
            import torch

            self._event = torch.cuda.Event

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = self._event(enable_timing=True)
        event.record()
        return event

    @staticmethod
    def seconds(begin: Any, end: Any) -> float:
        if isinstance(begin, float):
            return end - begin
        end.synchronize()
        return begin.elapsed_time(end) / 1000.0
