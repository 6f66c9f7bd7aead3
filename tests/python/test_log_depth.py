"""flopmeter's log-depth collectives in Python (flopmeter/_log_depth.py): the schedules against the segments
derived by hand in the C++ header (plugin/comm/log_depth.h; tests/test_log_depth.cpp pins the C++ schedule to
the same steps), an in-process run of every rank's schedule, and real Gloo groups of 1 to 9 and of 12, 15 and
16 processes against torch.distributed's own SUM, MAX and all-gather."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_distributed import run_job

from flopmeter import _log_depth, _native
from flopmeter._log_depth import IDLE, NONE, Step

WORKER = Path(__file__).with_name("log_depth_worker.py")


def test_allreduce_rounds_by_hand():
    # 2 H + D while D < 4, 2 H + 4 D - 2 from 4 on (+ 2 when world is not a power of two), H = min(L, ceil(log2
    # N)), D = L - H, L = floor(log2 world): world 1 -> 0; 2, N 71 -> 2; 3, N 71 -> 2 + 2; 4, N 5 -> 4; 8, N 3
    # (H 2, D 1) -> 5; 8, N 1 (D 3) -> 3; 16, N 1 (D 4) -> 14; 5, N 71 -> 4 + 2; 1024, N 71 (H 7, D 3) -> 17;
    # 2048 (D 4) -> 14 + 14; 16384 (D 7) -> 14 + 26; 2^17 (D 10) -> 14 + 38; 100000 (2^16 <= 100000 < 2^17,
    # D 9) -> 14 + 34 + 2; N 0 -> 0.
    expected = {(1, 71): 0, (2, 71): 2, (3, 71): 4, (4, 5): 4, (8, 3): 5, (8, 1): 3, (16, 1): 14, (5, 71): 6,
                (1024, 71): 17, (2048, 71): 28, (16384, 71): 40, (131072, 71): 52, (100000, 71): 50, (16, 0): 0}
    for (world, count), rounds in expected.items():
        assert _log_depth.allreduce_rounds(world, count) == rounds, (world, count)
        assert len(_log_depth.allreduce_schedule(0, world, count)) == rounds, (world, count)


def test_allgather_rounds_by_hand():
    # floor(log2 world) (+ 2 when world is not a power of two): c10d's ring takes world - 1.
    expected = {1: 0, 2: 1, 3: 3, 4: 2, 5: 4, 8: 3, 12: 5, 131072: 17, 100000: 18}
    for world, rounds in expected.items():
        assert _log_depth.allgather_rounds(world) == rounds, world
        assert len(_log_depth.allgather_schedule(0, world, 2)) == rounds, world


def test_allreduce_segments_are_the_hand_derived_ones():
    # World 4, N 5 (log_depth.h): level 0 splits [0,5) at 2, level 1 splits [0,2) at 1 and [2,5) at 3 (the index
    # whose bit is 0 keeps the lower half); the all-gather sends back what was kept, deepest level first.
    world4 = [
        [Step(1, (2, 5), (0, 2), True), Step(2, (1, 2), (0, 1), True), Step(2, (0, 1), (1, 2), False),
         Step(1, (0, 2), (2, 5), False)],
        [Step(0, (0, 2), (2, 5), True), Step(3, (3, 5), (2, 3), True), Step(3, (2, 3), (3, 5), False),
         Step(0, (2, 5), (0, 2), False)],
        [Step(3, (2, 5), (0, 2), True), Step(0, (0, 1), (1, 2), True), Step(0, (1, 2), (0, 1), False),
         Step(3, (0, 2), (2, 5), False)],
        [Step(2, (0, 2), (2, 5), True), Step(1, (2, 3), (3, 5), True), Step(1, (3, 5), (2, 3), False),
         Step(2, (2, 5), (0, 2), False)],
    ]
    for rank, steps in enumerate(world4):
        assert _log_depth.allreduce_schedule(rank, 4, 5) == steps, rank
    # World 3, N 5: rank 0 folds into rank 1 and sits out; one halving level at 2 between ranks 1 and 2, its
    # all-gather, then rank 1 hands the result to rank 0.
    world3 = [
        [Step(1, (0, 5), NONE, False), IDLE, IDLE, Step(1, NONE, (0, 5), False)],
        [Step(0, NONE, (0, 5), True), Step(2, (2, 5), (0, 2), True), Step(2, (0, 2), (2, 5), False),
         Step(0, (0, 5), NONE, False)],
        [IDLE, Step(1, (0, 2), (2, 5), True), Step(1, (2, 5), (0, 2), False), IDLE],
    ]
    for rank, steps in enumerate(world3):
        assert _log_depth.allreduce_schedule(rank, 3, 5) == steps, rank
    # World 8, N 3: the even indices hold one element after level 0 and double at levels 1 and 2 (both swap
    # [0,1) and both combine); they sit all-gather level 1 out.
    assert _log_depth.allreduce_schedule(0, 8, 3) == [
        Step(1, (1, 3), (0, 1), True), Step(2, (0, 1), (0, 1), True), Step(4, (0, 1), (0, 1), True), IDLE,
        Step(1, (0, 1), (1, 3), False)]
    assert _log_depth.allreduce_schedule(3, 8, 3) == [
        Step(2, (0, 1), (1, 3), True), Step(1, (1, 2), (2, 3), True), Step(7, (2, 3), (2, 3), True),
        Step(1, (2, 3), (1, 2), False), Step(2, (1, 3), (0, 1), False)]
    # World 16, N 1: no halving level, 4 shared ones: the binary tree of log_depth.h's worked example, 14 rounds
    # (reduce: depth 4 left; 3 left, right; 2 left, right; 1 left, right; then the broadcast in reverse).
    # Rank 3: children 7 and 8, parent 1; rank 15: a leaf under 7; rank 0: the root over 1 and 2.
    one = (0, 1)
    assert _log_depth.allreduce_schedule(3, 16, 1) == [
        IDLE, Step(7, NONE, one, True), Step(8, NONE, one, True), Step(1, one, NONE, False), IDLE, IDLE, IDLE,
        IDLE, IDLE, Step(1, NONE, one, False), IDLE, Step(7, one, NONE, False), Step(8, one, NONE, False), IDLE]
    assert _log_depth.allreduce_schedule(15, 16, 1) == [Step(7, one, NONE, False)] + [IDLE] * 12 + [
        Step(7, NONE, one, False)]
    assert _log_depth.allreduce_schedule(0, 16, 1) == [IDLE] * 5 + [
        Step(1, NONE, one, True), Step(2, NONE, one, True), Step(1, one, NONE, False), Step(2, one, NONE, False)] + [
        IDLE] * 5


def test_values_moved_per_rank_do_not_grow_with_the_world():
    # log_depth.h: for N = 71 at most (71 - 1) + (36 + 18 + 9 + 5 + 3 + 2 + 1) = 144 values over the halving
    # levels and their all-gather, plus 1 per doubling level up to 3 and at most 3 in the tree: 147 each way
    # at 1024 and 16384 ranks alike (the C++ test checks 2048 and 131072 too).
    for world in (1024, 16384):
        moved = [(sum(s.send[1] - s.send[0] for s in steps), sum(s.receive[1] - s.receive[0] for s in steps))
                 for steps in (_log_depth.allreduce_schedule(r, world, 71) for r in range(world))]
        assert max(m[0] for m in moved) == 147 and max(m[1] for m in moved) == 147, world


def test_allgather_blocks_are_the_hand_derived_ones():
    # World 3, 2 values per rank: rank 0 hands [0,2) to rank 1; rank 1 (ranks 0 and 1: [0,4)) swaps with rank 2
    # ([4,6)); rank 1 hands the table [0,6) to rank 0.
    assert _log_depth.allgather_schedule(0, 3, 2) == [Step(1, (0, 2), NONE, False), IDLE, Step(1, NONE, (0, 6), False)]
    assert _log_depth.allgather_schedule(1, 3, 2) == [
        Step(0, NONE, (0, 2), False), Step(2, (0, 4), (4, 6), False), Step(0, (0, 6), NONE, False)]
    assert _log_depth.allgather_schedule(2, 3, 2) == [IDLE, Step(1, (4, 6), (0, 4), False), IDLE]


@pytest.mark.parametrize("world", [2, 3, 5, 6, 7, 8, 9, 12, 16, 33])
def test_every_round_pairs_each_message_with_its_peer(world):
    # Rank r's step names peer p exactly when p's names r, and r sends the range p receives.
    for count in (1, 2, 3, 5, 71):
        for schedules in ([_log_depth.allreduce_schedule(r, world, count) for r in range(world)],
                          [_log_depth.allgather_schedule(r, world, count) for r in range(world)]):
            for round_ in range(len(schedules[0])):
                for r in range(world):
                    step = schedules[r][round_]
                    if step.peer < 0:
                        continue
                    other = schedules[step.peer][round_]
                    assert (other.peer, other.send, other.receive) == (r, step.receive, step.send), (world, count, r)


def _run_in_process(world, inputs, sum_count):
    """Every rank's all-reduce schedule run round by round in this process (messages posted, then taken)."""
    import torch

    values = [torch.tensor(v, dtype=torch.float64) for v in inputs]
    schedules = [_log_depth.allreduce_schedule(r, world, len(inputs[0])) for r in range(world)]
    for round_ in range(len(schedules[0]) if schedules[0] else 0):
        posted = {}
        for r in range(world):
            step = schedules[r][round_]
            if step.peer >= 0 and step.send != NONE:
                posted[r] = values[r][step.send[0]:step.send[1]].clone()
        for r in range(world):
            step = schedules[r][round_]
            if step.peer < 0 or step.receive == NONE:
                continue
            begin, end = step.receive
            if step.combine:
                _log_depth.combine(values[r][begin:end], posted[step.peer], sum_count, begin)
            else:
                values[r][begin:end] = posted[step.peer]
    return values


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5, 7, 8, 12, 16, 17])
def test_an_in_process_run_equals_the_plain_reduction_with_the_same_bits_on_every_rank(world):
    # Rank r: SUM part 7 r + i (integers: exact in any order, 7 w (w - 1) / 2 + w i by hand), MAX part r + j,
    # -r - j; then random doubles, whose sums depend on the order but must have the same bits on every rank.
    import random

    for count in (1, 2, 5, 71):
        sum_count = count // 2
        inputs = [[7.0 * r + i for i in range(sum_count)] +
                  [(r + j if j % 2 == 0 else -r - j) for j in range(count - sum_count)] for r in range(world)]
        w = world
        expected = [7 * w * (w - 1) / 2 + w * i for i in range(sum_count)] + \
                   [(w - 1 + j if j % 2 == 0 else -j) for j in range(count - sum_count)]
        for got in _run_in_process(world, inputs, sum_count):
            assert got.tolist() == expected, (world, count)
        rng = random.Random(world * 100 + count)
        noisy = [[rng.uniform(-1, 1) * 10 ** rng.randint(-4, 4) for _ in range(count)] for _ in range(world)]
        out = _run_in_process(world, noisy, sum_count)
        assert len({v.numpy().tobytes() for v in out}) == 1, (world, count)
        for j in range(sum_count, count):
            assert out[0][j].item() == max(v[j] for v in noisy)


def test_combine_is_symmetric_for_nan_and_signed_zeros():
    import torch

    nan = float("nan")
    for a, b in [(0.0, -0.0), (-0.0, 0.0), (nan, 1.0), (1.0, nan), (-1.0, -2.0)]:
        x, y = torch.tensor([a, a], dtype=torch.float64), torch.tensor([b, b], dtype=torch.float64)
        xy, yx = x.clone(), y.clone()
        _log_depth.combine(xy, y, 1)
        _log_depth.combine(yx, x, 1)
        assert xy.numpy().tobytes() == yx.numpy().tobytes(), (a, b)
    # Elements 2 and 3 of a vector with sum_count 3: element 2 adds (1 + 5), element 3 takes the maximum.
    part = torch.tensor([1.0, 4.0], dtype=torch.float64)
    _log_depth.combine(part, torch.tensor([5.0, 2.0], dtype=torch.float64), 3, first_index=2)
    assert part.tolist() == [6.0, 4.0]


def check_against_plain(ranks, sizes):
    for size in sizes:
        w = size
        for rank in range(size):
            for k, run in enumerate(ranks[rank][str(size)]):
                # By hand over w ranks: sums w (w - 1) / 2 + k w, 3 w (w - 1) / 2 + w, w; maxima w - 1, 0 and 100
                # (rank w // 2); and torch.distributed's own SUM and MAX must say the same.
                expected = [w * (w - 1) / 2 + k * w, 3 * w * (w - 1) / 2 + w, w, w - 1, 0, 100]
                assert run["log_depth"] == expected, (size, rank, k)
                assert run["plain"] == expected, (size, rank, k)
                # The all-gather: torch.distributed's, bit for bit.
                assert run["gathered"] == run["plain_gathered"], (size, rank, k)
                # One value, rank + 1 + k: (1 + ... + w) + k w = w (w + 1) / 2 + k w by hand; at 16 processes
                # (4 shared levels) it runs through the binary tree.
                assert run["single"] == [w * (w + 1) / 2 + k * w], (size, rank, k)
            # stop() ends the thread before it returns, and no finished job outlives its caller's references.
            assert ranks[rank][f"{size}_exit"] == {"idle_worker_held_a_job": False, "stop_returned": True,
                                                   "thread_alive_after_stop": False}, (size, rank)


def test_groups_of_one_to_nine_processes_match_the_plain_collectives(tmp_path):
    sizes = list(range(1, 10))
    check_against_plain(run_job(tmp_path, ','.join(map(str, sizes)), 9, worker=WORKER, timeout=300), sizes)


def test_groups_of_twelve_to_sixteen_processes_match_the_plain_collectives(tmp_path):
    sizes = [12, 15, 16]
    check_against_plain(run_job(tmp_path, ','.join(map(str, sizes)), 16, worker=WORKER, timeout=300), sizes)


def test_the_schedules_are_the_librarys_and_a_rank_outside_the_world_is_refused():
    # The schedules come from the library (flopmeter_log_depth_schedule); a rank outside [0, world) or a world
    # below 1 has none.
    for rank, world in ((4, 4), (-1, 4), (0, 0)):
        with pytest.raises(ValueError, match="rank"):
            _log_depth.allreduce_schedule(rank, world, 5)
    assert _native.lib().flopmeter_log_depth_min_ranks() == 4  # flopmeter/communicator.h, log_depth_min_ranks
    assert _native.lib().flopmeter_log_depth_schedule(2, 0, 4, 5, None, 0) == _native.E_REJECTED  # unknown kind
