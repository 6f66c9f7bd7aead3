"""flopmeter's per-log collectives over torch.distributed, as the C ABI's flopmeter_comm callbacks.

At each log the library asks for one collective (flopmeter_comm.start, one call per request): an ordinary log's
in-place SUM of its first values and MAX of the rest (a few dozen doubles, the same size whatever the job's),
and every topk_interval_logs logs the all-gather of the per-rank table (world_size rows, this rank's filled and
the others zero); it waits for it at the next log, and that wait, once it answers done or failed, releases the
handle. Here they run on a group of flopmeter's own (``new_group(backend="gloo")`` by default, made
collectively when the Meter is made), so a rank that skips an ``on_log`` costs intervals of metrics, never a
hang of the trainer's collectives: as ``all_reduce(async_op=True)`` (the SUM and the MAX on the two parts of the
buffer; the table as a SUM, zero but in each rank's own row), or on that group from 4 ranks on
(``small_allreduce="automatic"``) by the library's log-depth schedules (``_log_depth.py`` executes them on a
daemon thread): the SUM and MAX as one all-reduce, the table as an all-gather of this rank's row.

The callbacks run on the thread that called on_log, flush or the destructor, while the library holds the
plugin's lock. They never raise into C: a failure is a NULL handle (start) or -1 (wait), which the library
counts as a failed collective.
"""

from __future__ import annotations

import ctypes
import datetime
import itertools
import logging
from typing import Any, Dict, Optional

from . import _log_depth, _native

logger = logging.getLogger("flopmeter")

SMALL_ALLREDUCE_CHOICES = ("automatic", "backend", "log_depth")


def small_allreduce_choice(choice: Any) -> str:
    """Checks Meter's ``small_allreduce`` argument."""
    if choice not in SMALL_ALLREDUCE_CHOICES:
        raise ValueError(f"small_allreduce must be one of {', '.join(repr(c) for c in SMALL_ALLREDUCE_CHOICES)}, "
                         f"got {choice!r}")
    return str(choice)


class _Pending:
    __slots__ = ("work", "host", "failed", "result_slice")

    def __init__(self, work: Any, host: Any) -> None:
        self.work = work
        self.host = host
        self.failed = False
        self.result_slice: Optional[tuple] = None  # log-depth: this handle's part of the job's values


def _finished_within(pending: _Pending, timeout_ms: int) -> bool:
    """Whether the collective has finished, blocking at most `timeout_ms` without spinning.

    The collectives run on host tensors, waited for with ``Work.wait(timeout)``, which blocks on the work's
    condition variable (torch 1.13 and 2.x); when the timeout passes it raises, and the work, still running,
    is waited for again at a later call.
    """
    work = pending.work
    if work.is_completed():
        return True
    if timeout_ms == 0:
        return False  # a poll: backing off, the library only asks
    try:
        work.wait(timeout=datetime.timedelta(milliseconds=timeout_ms))
    except Exception:  # noqa: BLE001 - a timeout, or the collective failed: told apart below
        if not work.is_completed():
            return False  # still running: the library waits again at its next call
    return True  # finished (a failure raises again from the caller's work.wait())


class _Works:
    """Two torch works waited for as one (an ordinary log's SUM and MAX over a backend's own all-reduces)."""

    __slots__ = ("works",)

    def __init__(self, works: list) -> None:
        self.works = works

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self.works)

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        for work in self.works:
            if timeout is None:
                work.wait()
            else:
                work.wait(timeout=timeout)
        return True


class TorchCollective:
    """The flopmeter_comm of one Meter over a torch.distributed group.

    Holds no reference to the Meter, so that a Meter without a flush can still be garbage-collected (its
    finalizer keeps this object alive while the library may call it).
    """

    def __init__(self, group: Any, rank: int, world_size: int) -> None:
        self.group = group
        self.rank = rank
        self.world_size = world_size
        self._pending: Dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._warned = False
        self._log_depth: Optional[_log_depth.LogDepthWorker] = None
        self.comm = _native.sized(_native.Comm)
        self.comm.rank = rank
        self.comm.world_size = world_size
        self.comm.user = None
        self._start_sum = _native.START_ALLREDUCE(self._start_allreduce)
        self._wait = _native.WAIT(self._wait_for)
        self._release = _native.RELEASE(self._release_handle)
        self._start_max = _native.START_ALLREDUCE(self._start_allreduce_max)
        self._start_one = _native.START_COLLECTIVE(self._start_collective)
        self.comm.start_allreduce_sum = self._start_sum
        self.comm.wait = self._wait
        self.comm.release = self._release
        self.comm.start_allreduce_max = self._start_max
        self.comm.start = self._start_one  # the library asks through this one: one call per collective

    def use_log_depth(self, choice: str, own_group: bool) -> None:
        """Runs the logs' collectives by the log-depth algorithms when `choice` (small_allreduce) says so for this
        group."""
        import torch.distributed as dist

        if self.group is None or self.world_size < 2 or choice == "backend":
            return
        backend = str(dist.get_backend(self.group)).lower()
        if choice == "log_depth" and backend != "gloo":
            raise ValueError(f"small_allreduce='log_depth' needs a Gloo group; the group's backend is "
                             f"{backend!r}, whose own all-reduce is already logarithmic (pass 'backend')")
        if choice == "automatic" and not (own_group and backend == "gloo"
                                          and self.world_size >= _native.lib().flopmeter_log_depth_min_ranks()):
            return
        self._log_depth = _log_depth.LogDepthWorker(self.group, self.rank, self.world_size)

    @property
    def algorithm(self) -> str:
        """How the logs' collectives travel: "log_depth" or "backend"."""
        return "log_depth" if self._log_depth is not None else "backend"

    def close(self) -> None:
        if self._log_depth is not None:
            self._log_depth.stop()

    def _warn(self, message: str) -> None:
        if not self._warned:  # once per Meter: the library counts every failure in its health counters
            self._warned = True
            logger.warning("flopmeter: %s", message)

    def _start_allreduce_max(self, user: Any, values: Any, count: int) -> Optional[int]:
        return self._start_allreduce(user, values, count, op="max")

    def _start_allreduce(self, user: Any, values: Any, count: int, op: str = "sum") -> Optional[int]:
        """flopmeter_comm's start_allreduce_sum / start_allreduce_max: the library asks through ``start``
        (``_start_collective``) instead; these serve a library that does not."""
        address = ctypes.cast(values, ctypes.c_void_p).value
        return self._start(address, count, count if op == "sum" else 0, None, f"{op.upper()} all-reduce")

    def _start_collective(self, user: Any, request: Any) -> Optional[int]:
        """flopmeter_comm's start: one call per collective the library needs (flopmeter_collective)."""
        try:
            r = request.contents
            address = ctypes.cast(r.values, ctypes.c_void_p).value
            if r.kind == _native.COLLECTIVE_ALLGATHER:
                return self._start(address, self.world_size * r.count, None, r.count, "table all-gather")
            return self._start(address, r.count, r.sum_count, None, "all-reduce")
        except Exception as e:  # noqa: BLE001 - nothing may cross into C
            self._warn(f"could not start the per-log collective: {e}")
            return None

    def _start(self, address: int, count: int, sum_count: Optional[int], row: Optional[int],
               what: str) -> Optional[int]:
        """Starts the SUM of values[0, sum_count) and the MAX of the rest (``row`` None), or the all-gather of
        this rank's ``row`` values into the world x row table at ``address`` (zeros but this rank's row)."""
        try:
            handle = next(self._ids)
            table = row is not None
            if self.group is None:
                # One process: the reduction over one rank is the buffer itself.
                self._pending[handle] = _Pending(None, None)
                return handle
            import torch

            host = torch.frombuffer((ctypes.c_double * count).from_address(address), dtype=torch.float64)
            if self._log_depth is not None:
                if table:
                    work = self._log_depth.submit_allgather(host[self.rank * row:(self.rank + 1) * row])
                else:
                    work = self._log_depth.submit(host, sum_count)  # a copy: the values are written at the wait
                pending = _Pending(work, host)
                pending.result_slice = (0, count)
                self._pending[handle] = pending
                return handle
            import torch.distributed as dist

            if table or sum_count == count:
                work = dist.all_reduce(host, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
            else:
                works = [dist.all_reduce(part, op=op, group=self.group, async_op=True)
                         for part, op in ((host[:sum_count], dist.ReduceOp.SUM),
                                          (host[sum_count:], dist.ReduceOp.MAX)) if part.numel()]
                work = works[0] if len(works) == 1 else _Works(works)
            self._pending[handle] = _Pending(work, host)
            return handle
        except Exception as e:  # noqa: BLE001 - nothing may cross into C
            self._warn(f"could not start the per-log {what}: {e}")
            return None

    def _wait_for(self, user: Any, handle: Any, timeout_ms: int) -> int:
        status = self._wait_status(int(handle or 0), timeout_ms)
        if status != 1:  # done or failed: the answer releases the handle (flopmeter_comm.start's contract)
            self._pending.pop(int(handle or 0), None)
        return status

    def _wait_status(self, handle: int, timeout_ms: int) -> int:
        pending = self._pending.get(handle)
        if pending is None:
            return -1
        try:
            if pending.work is not None:
                if not _finished_within(pending, max(0, int(timeout_ms))):
                    return 1
                pending.work.wait()  # finished: returns at once, or raises if the collective failed
            if pending.result_slice is not None:
                # The log-depth job worked on a copy: the caller's values are written here, once.
                begin, end = pending.result_slice
                pending.host.copy_(pending.work.values[begin:end])
                pending.result_slice = None
            return 0
        except Exception as e:  # noqa: BLE001
            self._warn(f"the per-log all-reduce failed: {e}")
            return -1

    def _release_handle(self, user: Any, handle: Any) -> None:
        self._pending.pop(int(handle or 0), None)


def world_group(process_group: Any):
    """The group, rank and world size the Meter uses, or None for a single process.

    Without a process_group: flopmeter's own Gloo group over the whole world when torch.distributed is
    initialised (a collective call: every rank makes its Meter at the same point), else None.
    A process_group smaller than the world is refused: flopmeter derives the dp, tp, cp and pp groups itself
    and needs every rank of the job.
    """
    import sys

    torch = sys.modules.get("torch")
    if process_group is None:
        if torch is None:
            return None
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return None
        group = dist.new_group(backend="gloo")
        return group, dist.get_rank(), dist.get_world_size()
    if torch is None:
        raise TypeError("process_group is given but torch is not imported")
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("process_group: torch.distributed is not initialised")
    size = dist.get_world_size(process_group)
    world = dist.get_world_size()
    if size != world:
        raise ValueError(
            f"process_group spans {size} of the job's {world} ranks: flopmeter needs a group over every rank of the "
            "job (it derives the data-, tensor-, context- and pipeline-parallel groups from [parallel] itself); "
            "pass a group over the whole world, e.g. torch.distributed.new_group(backend='gloo'), or none"
        )
    return process_group, dist.get_rank(process_group), size
