"""The ordinary log's SUM and MAX, and the per-rank table's all-gather, in a number of rounds logarithmic in
the job, over torch.distributed send/recv on a daemon thread.

The schedules are the library's (flopmeter_log_depth_schedule; plugin/comm/log_depth.h has the derivations):
this module only executes their steps. c10d's Gloo all-reduce and all-gather are rings of 2 (world - 1) and
world - 1 message rounds, so their latency grows linearly with the job.

The all-reduce of N values (SUM of the first ``sum_count``, MAX of the rest) is recursive halving then
recursive doubling; the all-gather of one row per rank is recursive doubling over blocks. Every rank ends
with the same bits: ``combine`` is the library's order-independent combination (IEEE addition commutes; the
maximum is made symmetric for NaN and signed zeros).

One worker thread per Meter runs the jobs in the order the Meter started them (every rank starts them in the
same order, so messages pair by order; one tag keeps them apart from the trainer's). ``submit`` and
``submit_allgather`` return at once; the returned work is waited for like a torch ``Work``
(``wait(timeout)`` raises when the time passes or the job failed), so on_log stays non-blocking and the
result is read one log later.
"""

from __future__ import annotations

import datetime
import queue
import threading
from typing import Any, List, NamedTuple, Optional, Tuple

TAG = 0x464C4F50  # "FLOP": flopmeter's point-to-point messages
# How long stop() waits for the thread: its last job finished before the Meter's flush returned (the flush
# waited for it), so a healthy job's thread ends in microseconds; 10 s bounds an exit behind a peer that hangs.
STOP_JOIN_TIMEOUT_S = 10.0

Range = Tuple[int, int]  # the elements [begin, end) of the buffer
NONE: Range = (0, 0)


class Step(NamedTuple):
    """One rank's round: nothing (peer -1), or send ``values[send]`` to ``peer`` and/or receive ``peer``'s values
    for ``receive``; ``combine``: combined into ``values[receive]`` (combine's rule by index), else they replace
    it."""

    peer: int
    send: Range
    receive: Range
    combine: bool


IDLE = Step(-1, NONE, NONE, False)


_ALLREDUCE = 0  # FLOPMETER_LOG_DEPTH_ALLREDUCE
_ALLGATHER = 1  # FLOPMETER_LOG_DEPTH_ALLGATHER


def _schedule(kind: int, rank: int, world: int, count: int) -> List[Step]:
    """The library's schedule (flopmeter_log_depth_schedule), as Steps."""
    from . import _native

    function = _native.lib().flopmeter_log_depth_schedule
    rounds = function(kind, rank, world, count, None, 0)
    if rounds < 0:
        raise ValueError(f"no log-depth schedule for rank {rank} of a world of {world} (rank must be in [0, world), "
                         f"world in [1, {_native.MAX_WORLD_SIZE}])")
    steps = (_native.LogDepthStep * max(rounds, 1))()
    function(kind, rank, world, count, steps, rounds)
    return [IDLE if s.peer < 0 else
            Step(s.peer, (s.send_begin, s.send_end), (s.receive_begin, s.receive_end), bool(s.combine))
            for s in steps[:rounds]]


def allreduce_schedule(rank: int, world: int, count: int) -> List[Step]:
    """Rank ``rank``'s step in every round of the all-reduce of ``count`` values."""
    return _schedule(_ALLREDUCE, rank, world, count)


def allreduce_rounds(world: int, count: int) -> int:
    """2 H + D (D < 4) or 2 H + 4 D - 2 (the tree), + 2 when world is not a power of two; 0 for one rank or no
    values (plugin/comm/log_depth.h)."""
    return len(allreduce_schedule(0, world, count))


def allgather_schedule(rank: int, world: int, count: int) -> List[Step]:
    """Rank ``rank``'s step in every round of the all-gather of ``count`` values per rank (ranges in the
    world x count table)."""
    return _schedule(_ALLGATHER, rank, world, count)


def allgather_rounds(world: int) -> int:
    """log2(pof2), + 2 when world is not a power of two; 0 for one rank."""
    return len(allgather_schedule(0, world, 1))


def combine(into: Any, other: Any, sum_count: int, first_index: int = 0) -> None:
    """Combines ``other`` into ``into`` (1-D float64 tensors of one length), whose first element is the vector's
    element ``first_index``: elements below ``sum_count`` add, the others take the symmetric maximum (NaN wins,
    +0 over -0)."""
    import torch

    split = max(0, min(into.numel(), sum_count - first_index))
    into[:split].add_(other[:split])
    a, b = into[split:], other[split:]
    nan = torch.isnan(a) | torch.isnan(b)
    equal_pick = torch.where(torch.signbit(a), b, a)
    result = torch.where(a == b, equal_pick, torch.where(a > b, a, b))
    result = torch.where(nan, torch.full_like(a, float("nan")), result)
    a.copy_(result)


class LogDepthWork:
    """One job, waited for like a torch ``Work``: ``values`` holds the result once it finished."""

    __slots__ = ("values", "sum_count", "gather_count", "steps", "finished", "error")

    def __init__(self, values: Any, sum_count: int, gather_count: int = 0, steps: Optional[List[Step]] = None) -> None:
        self.values = values  # a tensor of this job's own (a copy of the caller's values, or the table)
        self.sum_count = sum_count
        self.gather_count = gather_count  # > 0: an all-gather of this many values per rank
        self.steps = steps or []  # this rank's schedule, fetched from the library on the submitting thread
        self.finished = threading.Event()
        self.error: Optional[BaseException] = None

    def is_completed(self) -> bool:
        return self.finished.is_set()

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        what = "all-gather" if self.gather_count else "all-reduce"
        seconds = None if timeout is None else timeout.total_seconds()
        if not self.finished.wait(seconds):
            raise RuntimeError(f"flopmeter's log-depth {what}: timed out")
        if self.error is not None:
            raise RuntimeError(f"flopmeter's log-depth {what} failed: {self.error}")
        return True


class LogDepthWorker:
    """The daemon thread that runs one Meter's jobs over ``group`` (every rank of the job)."""

    def __init__(self, group: Any, rank: int, world: int) -> None:
        self.group = group
        self.rank = rank
        self.world = world
        self._jobs: "queue.Queue[Optional[LogDepthWork]]" = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="flopmeter-log-depth", daemon=True)
        self._thread.start()

    def submit(self, values: Any, sum_count: int) -> LogDepthWork:
        """The all-reduce of ``values`` (1-D float64): SUM of the first ``sum_count``, MAX of the rest."""
        job = LogDepthWork(values.clone(), sum_count, steps=allreduce_schedule(self.rank, self.world, values.numel()))
        self._jobs.put(job)
        return job

    def submit_allgather(self, row: Any) -> LogDepthWork:
        """The all-gather of ``row`` (1-D float64, the same length on every rank): the job's ``values`` become
        the world x len(row) table, rank q's row at [q len, (q + 1) len)."""
        import torch

        count = row.numel()
        table = torch.zeros(self.world * count, dtype=torch.float64)
        table[self.rank * count:(self.rank + 1) * count] = row
        job = LogDepthWork(table, 0, gather_count=max(count, 1),
                           steps=allgather_schedule(self.rank, self.world, count) if count else [])
        if count == 0:
            job.finished.set()
        else:
            self._jobs.put(job)
        return job

    def stop(self, join_timeout_s: float = STOP_JOIN_TIMEOUT_S) -> bool:
        """Ends the thread once the jobs before this call are through, and waits up to ``join_timeout_s`` for it
        to end. Returns whether it ended.

        The wait is what keeps the process's exit clean. Python 3.11 ends a daemon thread that wants the GIL
        back after the interpreter began to finalize by ``pthread_exit``, whose unwinding through torch's
        ``gil_scoped_release`` (a destructor, so ``noexcept``) calls ``std::terminate``: the process aborts
        ("terminate called without an active exception"). torch releases the GIL in every blocking call and
        in freeing a tensor. The Meter's finalizer calls this from ``atexit``, before finalization, so the
        thread is gone by then. Only a thread still blocked on a peer that never answers outlives the wait.
        """
        self._jobs.put(None)
        if self._thread is threading.current_thread():
            return False
        self._thread.join(join_timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                self._run_steps(job.steps, job)
            except BaseException as e:  # noqa: BLE001 - reported through the job
                job.error = e
            finally:
                job.finished.set()
            # Dropped here, not when the next get() returns: the last reference to the job's tensors may be this
            # one, and freeing a tensor releases the GIL (stop() says why that must not happen at exit).
            job = None

    def _run_steps(self, steps: List[Step], job: LogDepthWork) -> None:
        import torch
        import torch.distributed as dist

        values = job.values
        for peer, (s_begin, s_end), (r_begin, r_end), combining in steps:
            if peer < 0:
                continue
            outgoing = values[s_begin:s_end].clone() if s_end > s_begin else None  # contiguous, never written
            incoming = torch.empty(r_end - r_begin, dtype=torch.float64) if r_end > r_begin else None
            works = []
            if outgoing is not None:
                works.append(dist.isend(outgoing, peer, group=self.group, tag=TAG))
            if incoming is not None:
                works.append(dist.irecv(incoming, peer, group=self.group, tag=TAG))
            for work in reversed(works):  # both in flight together; the receive first
                work.wait()
            if incoming is None:
                continue
            if combining:
                combine(values[r_begin:r_end], incoming, job.sum_count, r_begin)
            else:
                values[r_begin:r_end].copy_(incoming)
