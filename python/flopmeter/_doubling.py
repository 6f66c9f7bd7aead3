"""The ordinary log's SUM and MAX by recursive doubling over torch.distributed send/recv, on a daemon thread.

The same schedule as the C++ library's (plugin/comm/recursive_doubling.h): c10d's Gloo all-reduce is a ring of
2 (world - 1) message rounds, so its latency grows linearly with the job; recursive doubling takes
floor(log2 world) rounds (+ 2 when world is not a power of two: the extra ranks fold in first and get the
result last) of the whole 64-double vector. Every rank ends with the same bits: both partners of an exchange
combine the same two vectors with an order-independent combination (IEEE addition commutes; the maximum is
made symmetric for NaN and signed zeros).

One worker thread per Meter runs the jobs in the order the Meter started them (every rank starts them in the
same order, so messages pair by order; one tag keeps them apart from the trainer's). ``submit`` returns at
once; the returned work is waited for like a torch ``Work`` (``wait(timeout)`` raises when the time passes or
the job failed), so on_log stays non-blocking and the result is read one log later.
"""

from __future__ import annotations

import datetime
import queue
import threading
from typing import Any, List, Optional, Tuple

TAG = 0x464C4F50  # "FLOP": flopmeter's point-to-point messages

IDLE, SEND_PARTIAL, RECEIVE_AND_COMBINE, EXCHANGE_AND_COMBINE, SEND_RESULT, RECEIVE_RESULT = range(6)


def rounds(world: int) -> int:
    """floor(log2 world), + 2 when world is not a power of two; 0 for one rank."""
    if world <= 1:
        return 0
    pof2 = 1 << (world.bit_length() - 1)
    return (pof2.bit_length() - 1) + (0 if pof2 == world else 2)


def schedule(rank: int, world: int) -> List[Tuple[int, int]]:
    """Rank ``rank``'s (action, peer) in every round (``rounds(world)`` of them)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside [0, {world})")
    if world == 1:
        return []
    pof2 = 1 << (world.bit_length() - 1)
    rem = world - pof2  # ranks 0, 2, ..., 2 rem - 2 sit out of the doubling
    folded = rank < 2 * rem
    sits_out = folded and rank % 2 == 0
    index = rank // 2 if folded else rank - rem

    def rank_of(i: int) -> int:
        return 2 * i + 1 if i < rem else i + rem

    steps: List[Tuple[int, int]] = []
    if rem:
        steps.append((IDLE, -1) if not folded else (SEND_PARTIAL, rank + 1) if sits_out else
                     (RECEIVE_AND_COMBINE, rank - 1))
    distance = 1
    while distance < pof2:
        steps.append((IDLE, -1) if sits_out else (EXCHANGE_AND_COMBINE, rank_of(index ^ distance)))
        distance *= 2
    if rem:
        steps.append((IDLE, -1) if not folded else (RECEIVE_RESULT, rank + 1) if sits_out else
                     (SEND_RESULT, rank - 1))
    return steps


def combine(into: Any, other: Any, sum_count: int) -> None:
    """into[:sum_count] += other[:sum_count]; into[sum_count:] = the symmetric maximum (NaN wins, +0 over -0)."""
    import torch

    into[:sum_count].add_(other[:sum_count])
    a, b = into[sum_count:], other[sum_count:]
    nan = torch.isnan(a) | torch.isnan(b)
    equal_pick = torch.where(torch.signbit(a), b, a)
    result = torch.where(a == b, equal_pick, torch.where(a > b, a, b))
    result = torch.where(nan, torch.full_like(a, float("nan")), result)
    a.copy_(result)


class DoublingWork:
    """One job, waited for like a torch ``Work``."""

    __slots__ = ("values", "sum_count", "finished", "error")

    def __init__(self, values: Any, sum_count: int) -> None:
        self.values = values  # a tensor of this job's own (a copy of the caller's values)
        self.sum_count = sum_count
        self.finished = threading.Event()
        self.error: Optional[BaseException] = None

    def is_completed(self) -> bool:
        return self.finished.is_set()

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        seconds = None if timeout is None else timeout.total_seconds()
        if not self.finished.wait(seconds):
            raise RuntimeError("flopmeter's recursive-doubling all-reduce: timed out")
        if self.error is not None:
            raise RuntimeError(f"flopmeter's recursive-doubling all-reduce failed: {self.error}")
        return True


class DoublingWorker:
    """The daemon thread that runs one Meter's jobs over ``group`` (every rank of the job)."""

    def __init__(self, group: Any, rank: int, world: int) -> None:
        self.group = group
        self.rank = rank
        self.world = world
        self._jobs: "queue.Queue[Optional[DoublingWork]]" = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="flopmeter-doubling", daemon=True)
        self._thread.start()

    def submit(self, values: Any, sum_count: int) -> DoublingWork:
        job = DoublingWork(values.clone(), sum_count)
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        self._jobs.put(None)  # ends the thread once the jobs before it are through

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                self._reduce(job)
            except BaseException as e:  # noqa: BLE001 - reported through the job
                job.error = e
            finally:
                job.finished.set()

    def _reduce(self, job: DoublingWork) -> None:
        import torch
        import torch.distributed as dist

        values = job.values
        incoming = torch.empty_like(values)
        for action, peer in schedule(self.rank, self.world):
            if action == IDLE:
                continue
            if action in (SEND_PARTIAL, SEND_RESULT):
                dist.send(values, peer, group=self.group, tag=TAG)
            elif action == RECEIVE_AND_COMBINE:
                dist.recv(incoming, peer, group=self.group, tag=TAG)
                combine(values, incoming, job.sum_count)
            elif action == RECEIVE_RESULT:
                dist.recv(values, peer, group=self.group, tag=TAG)
            else:  # EXCHANGE_AND_COMBINE: both messages in flight together
                outgoing = values.clone()
                sent = dist.isend(outgoing, peer, group=self.group, tag=TAG)
                received = dist.irecv(incoming, peer, group=self.group, tag=TAG)
                received.wait()
                sent.wait()
                combine(values, incoming, job.sum_count)
