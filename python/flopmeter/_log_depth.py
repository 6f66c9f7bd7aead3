"""The ordinary log's SUM and MAX, and the per-rank table's all-gather, in a number of rounds logarithmic in
the job, over torch.distributed send/recv on a daemon thread.

The same schedules as the C++ library's (plugin/comm/log_depth.h, where the derivations are): c10d's Gloo
all-reduce and all-gather are rings of 2 (world - 1) and world - 1 message rounds, so their latency grows
linearly with the job.

- The all-reduce of N values (SUM of the first ``sum_count``, MAX of the rest) is recursive halving (a
  reduce-scatter) then recursive doubling (an all-gather). With H = min(log2(world), ceil(log2 N)) halving
  levels, the D = log2(world) - H levels beyond them, where every segment is one value, are doubling levels
  while D < 4, else a binary tree that reduces and broadcasts the value: 2 H + D rounds, or 2 H + 4 D - 2
  (+ 2 when world is not a power of two: the extra ranks fold in first and get the result last). Each rank
  sends and receives at most 2 N + ceil(log2 N) + 1 values, whatever the job's size. Every rank ends with the
  same bits: each value is reduced by one chain of ranks, its owners combine it with an order-independent
  combination (IEEE addition commutes; the maximum is made symmetric for NaN and signed zeros) or the tree's
  root alone does, the others receive copies.
- The all-gather of one row per rank is recursive doubling over blocks: log2(world) rounds (+ 2).

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


def _ceil_log2(count: int) -> int:
    return (count - 1).bit_length() if count > 1 else 0


class _Fold:
    """How ``world`` folds onto a power of two (C++ log_depth.cpp's ``fold``)."""

    def __init__(self, rank: int, world: int) -> None:
        self.pof2 = 1 << (world.bit_length() - 1)
        self.rem = world - self.pof2  # ranks 0, 2, ..., 2 rem - 2 sit out
        self.folded = rank < 2 * self.rem
        self.sits_out = self.folded and rank % 2 == 0
        self.index = rank // 2 if self.folded else rank - self.rem
        self.levels = self.pof2.bit_length() - 1

    def first_rank(self, i: int) -> int:
        return 2 * i if i < self.rem else i + self.rem

    def rank_of(self, i: int) -> int:
        return 2 * i + 1 if i < self.rem else i + self.rem


def _check(rank: int, world: int) -> None:
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside [0, {world})")


# From this many shared levels on (every segment one element), a binary tree reduces and broadcasts the element
# instead of one doubling level each (log_depth.h: at most 3 values each way per rank, whatever the job).
TREE_MIN_SHARED_LEVELS = 4


def _levels(pof2: int, count: int) -> Tuple[int, int, bool]:
    """(halving levels H, shared levels D, whether the tree runs them): H = min(L, ceil(log2 count)), D = L - H."""
    levels = pof2.bit_length() - 1
    halving = min(levels, _ceil_log2(count))
    return halving, levels - halving, levels - halving >= TREE_MIN_SHARED_LEVELS


def allreduce_rounds(world: int, count: int) -> int:
    """2 H + D (D < 4) or 2 H + 4 D - 2 (the tree), + 2 when world is not a power of two; 0 for one rank or no
    values."""
    if world <= 1 or count == 0:
        return 0
    pof2 = 1 << (world.bit_length() - 1)
    halving, shared, tree = _levels(pof2, count)
    return 2 * halving + (4 * shared - 2 if tree else shared) + (0 if pof2 == world else 2)


def _tree_steps(f: "_Fold", halving: int, shared: int, segment: Range) -> List[Step]:
    """Index f.index's steps in the binary tree over the 2^shared indices that agree with it on the low
    ``halving`` bits: member j = index >> halving, parent (j - 1) // 2, children 2j + 1 (left), 2j + 2 (right).
    Reduce from the deepest level up, broadcast back down; each level's left children, then its right ones;
    the deepest level's one node (2^shared - 1) is a left child, so its right round is left out each way."""
    low = f.index & ((1 << halving) - 1)
    j = f.index >> halving
    members = 1 << shared
    depth = (j + 1).bit_length() - 1
    rounds = [(True, d, right) for d in range(shared, 0, -1) for right in (False, True) if not (right and d == shared)]
    rounds += [(False, d, right) for d in range(1, shared + 1) for right in (False, True) if not (right and d == shared)]
    steps: List[Step] = []
    for reduce, d, right in rounds:
        child = 2 * j + (2 if right else 1)
        if f.sits_out:
            steps.append(IDLE)
        elif depth == d and j > 0 and (j % 2 == 0) == right:  # reduce: send up; broadcast: take the result
            parent = f.rank_of((((j - 1) // 2) << halving) | low)
            steps.append(Step(parent, segment, NONE, False) if reduce else Step(parent, NONE, segment, False))
        elif depth == d - 1 and child < members:  # reduce: combine the child's; broadcast: send it down
            peer = f.rank_of((child << halving) | low)
            steps.append(Step(peer, NONE, segment, True) if reduce else Step(peer, segment, NONE, False))
        else:
            steps.append(IDLE)
    return steps


def allreduce_schedule(rank: int, world: int, count: int) -> List[Step]:
    """Rank ``rank``'s step in every round of the all-reduce of ``count`` values (``allreduce_rounds``)."""
    _check(rank, world)
    if world == 1 or count == 0:
        return []
    f = _Fold(rank, world)
    whole = (0, count)
    steps: List[Step] = []
    if f.rem:
        steps.append(IDLE if not f.folded else Step(rank + 1, whole, NONE, False) if f.sits_out else
                     Step(rank - 1, NONE, whole, True))
    halved: List[Optional[Tuple[Range, Range]]] = [None] * f.levels  # (segment before the level, half kept)
    halving, shared, tree = _levels(f.pof2, count)
    begin, end = whole
    for k in range(halving if tree else f.levels):
        if f.sits_out:
            steps.append(IDLE)
            continue
        partner = f.rank_of(f.index ^ (1 << k))
        if end - begin >= 2:
            middle = begin + (end - begin) // 2
            upper = bool(f.index & (1 << k))  # the index whose bit k is set keeps the upper half
            kept, given = ((middle, end), (begin, middle)) if upper else ((begin, middle), (middle, end))
            steps.append(Step(partner, given, kept, True))
            halved[k] = ((begin, end), kept)
            begin, end = kept
        else:  # one value: both swap it and both combine it
            steps.append(Step(partner, (begin, end), (begin, end), True))
    if tree:
        steps += _tree_steps(f, halving, shared, (begin, end))
    for k in reversed(range(halving)):
        split = halved[k]
        if f.sits_out or split is None:
            steps.append(IDLE)
            continue
        (p_begin, p_end), kept = split
        given = (kept[1], p_end) if kept[0] == p_begin else (p_begin, kept[0])
        steps.append(Step(f.rank_of(f.index ^ (1 << k)), kept, given, False))
    if f.rem:
        steps.append(IDLE if not f.folded else Step(rank + 1, NONE, whole, False) if f.sits_out else
                     Step(rank - 1, whole, NONE, False))
    return steps


def allgather_rounds(world: int) -> int:
    """log2(pof2), + 2 when world is not a power of two; 0 for one rank."""
    if world <= 1:
        return 0
    pof2 = 1 << (world.bit_length() - 1)
    return (pof2.bit_length() - 1) + (0 if pof2 == world else 2)


def allgather_schedule(rank: int, world: int, count: int) -> List[Step]:
    """Rank ``rank``'s step in every round of the all-gather of ``count`` values per rank (ranges in the
    world x count table)."""
    _check(rank, world)
    if world == 1 or count == 0:
        return []
    f = _Fold(rank, world)

    def ranks(first: int, end: int) -> Range:
        return (first * count, end * count)

    def held(index: int, distance: int) -> Range:  # the blocks of the indices [index & ~(distance - 1), + distance)
        low = index & ~(distance - 1)
        return ranks(f.first_rank(low), f.first_rank(low + distance))

    steps: List[Step] = []
    if f.rem:
        steps.append(IDLE if not f.folded else Step(rank + 1, ranks(rank, rank + 1), NONE, False) if f.sits_out
                     else Step(rank - 1, NONE, ranks(rank - 1, rank), False))
    distance = 1
    while distance < f.pof2:
        if f.sits_out:
            steps.append(IDLE)
        else:
            partner = f.index ^ distance
            steps.append(Step(f.rank_of(partner), held(f.index, distance), held(partner, distance), False))
        distance *= 2
    if f.rem:
        table = ranks(0, world)
        steps.append(IDLE if not f.folded else Step(rank + 1, NONE, table, False) if f.sits_out else
                     Step(rank - 1, table, NONE, False))
    return steps


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

    __slots__ = ("values", "sum_count", "gather_count", "finished", "error")

    def __init__(self, values: Any, sum_count: int, gather_count: int = 0) -> None:
        self.values = values  # a tensor of this job's own (a copy of the caller's values, or the table)
        self.sum_count = sum_count
        self.gather_count = gather_count  # > 0: an all-gather of this many values per rank
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
        job = LogDepthWork(values.clone(), sum_count)
        self._jobs.put(job)
        return job

    def submit_allgather(self, row: Any) -> LogDepthWork:
        """The all-gather of ``row`` (1-D float64, the same length on every rank): the job's ``values`` become
        the world x len(row) table, rank q's row at [q len, (q + 1) len)."""
        import torch

        count = row.numel()
        table = torch.zeros(self.world * count, dtype=torch.float64)
        table[self.rank * count:(self.rank + 1) * count] = row
        job = LogDepthWork(table, 0, gather_count=max(count, 1))
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
                if job.gather_count:
                    self._run_steps(allgather_schedule(self.rank, self.world, job.gather_count), job)
                else:
                    self._run_steps(allreduce_schedule(self.rank, self.world, job.values.numel()), job)
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
