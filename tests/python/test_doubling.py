"""flopmeter's recursive-doubling all-reduce in Python (flopmeter/_doubling.py): the schedule by hand, and real
Gloo groups of 1 to 9 and of 12, 15 and 16 processes against torch.distributed's own SUM and MAX."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_distributed import run_job

from flopmeter import _doubling

WORKER = Path(__file__).with_name("doubling_worker.py")


def test_rounds_by_hand():
    # floor(log2 w) + 2 when w is not a power of two: 1 -> 0, 2 -> 1, 3 -> 3, 4 -> 2, 5..7 -> 4, 8 -> 3,
    # 9 -> 5, 16 -> 4, 17 -> 6, 2^17 -> 17, 100000 -> 16 + 2.
    expected = {1: 0, 2: 1, 3: 3, 4: 2, 5: 4, 6: 4, 7: 4, 8: 3, 9: 5, 16: 4, 17: 6, 131072: 17, 100000: 18}
    for world, rounds in expected.items():
        assert _doubling.rounds(world) == rounds, world
        assert len(_doubling.schedule(0, world)) == rounds, world


@pytest.mark.parametrize("world", [2, 3, 5, 6, 7, 8, 9, 12, 16, 33])
def test_every_round_pairs_each_message_with_its_peer(world):
    partner = {_doubling.SEND_PARTIAL: _doubling.RECEIVE_AND_COMBINE,
               _doubling.RECEIVE_AND_COMBINE: _doubling.SEND_PARTIAL,
               _doubling.SEND_RESULT: _doubling.RECEIVE_RESULT, _doubling.RECEIVE_RESULT: _doubling.SEND_RESULT,
               _doubling.EXCHANGE_AND_COMBINE: _doubling.EXCHANGE_AND_COMBINE}
    steps = [_doubling.schedule(r, world) for r in range(world)]
    for round_ in range(_doubling.rounds(world)):
        for r in range(world):
            action, peer = steps[r][round_]
            if action == _doubling.IDLE:
                continue
            assert steps[peer][round_] == (partner[action], r), (world, round_, r)


def test_combine_is_symmetric_for_nan_and_signed_zeros():
    import torch

    nan = float("nan")
    for a, b in [(0.0, -0.0), (-0.0, 0.0), (nan, 1.0), (1.0, nan), (-1.0, -2.0)]:
        x, y = torch.tensor([a, a], dtype=torch.float64), torch.tensor([b, b], dtype=torch.float64)
        xy, yx = x.clone(), y.clone()
        _doubling.combine(xy, y, 1)
        _doubling.combine(yx, x, 1)
        assert xy.numpy().tobytes() == yx.numpy().tobytes(), (a, b)


def check_against_plain(ranks, sizes):
    for size in sizes:
        w = size
        for rank in range(size):
            for k, run in enumerate(ranks[rank][str(size)]):
                # By hand over w ranks: sums w (w - 1) / 2 + k w, 3 w (w - 1) / 2 + w, w; maxima w - 1, 0 and 100
                # (rank w // 2); and torch.distributed's own SUM and MAX must say the same.
                expected = [w * (w - 1) / 2 + k * w, 3 * w * (w - 1) / 2 + w, w, w - 1, 0, 100]
                assert run["doubling"] == expected, (size, rank, k)
                assert run["plain"] == expected, (size, rank, k)


def test_groups_of_one_to_nine_processes_match_the_plain_all_reduce(tmp_path):
    sizes = list(range(1, 10))
    check_against_plain(run_job(tmp_path, ','.join(map(str, sizes)), 9, worker=WORKER, timeout=300), sizes)


def test_groups_of_twelve_to_sixteen_processes_match_the_plain_all_reduce(tmp_path):
    sizes = [12, 15, 16]
    check_against_plain(run_job(tmp_path, ','.join(map(str, sizes)), 16, worker=WORKER, timeout=300), sizes)
