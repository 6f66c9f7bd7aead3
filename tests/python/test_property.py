"""Random arguments through the API (Hypothesis): every call either counts, or raises TypeError or ValueError
naming an argument; nothing crashes the interpreter or hangs, and what is counted is exactly what was valid."""

from __future__ import annotations


import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flopmeter

ARGUMENT_NAMES = ("document_lengths", "cu_seqlens", "position_ids", "grid_thw", "padding_tokens", "samples",
                  "loss_sum", "label_tokens", "batch", "invalid micro-batch", "give one of")

ints = st.integers(min_value=-(2**65), max_value=2**65)
small = st.integers(min_value=-3, max_value=40)
scalars = st.one_of(small, ints, st.floats(allow_nan=True), st.booleans(), st.none(), st.text(max_size=3),
                    st.just([1, 2]))


def arrays(row_width=None):
    shape = st.just(None) if row_width is None else st.just(row_width)
    lists = st.lists(small, max_size=12)

    def form(values, kind, dtype):
        if kind == "list":
            return values
        if kind == "tuple":
            return tuple(values)
        if kind == "numpy":
            return np.array(values).astype(dtype)
        if kind == "torch":
            t = torch.tensor(values, dtype={"int64": torch.int64, "int32": torch.int32, "float64": torch.float64,
                                            "bool": torch.bool, "uint8": torch.uint8}[dtype])
            return t
        if kind == "torch-2d":
            return torch.tensor([values], dtype=torch.int64)
        if kind == "torch-strided":
            return torch.tensor(values + values, dtype=torch.int64)[::2]
        return "not an array"

    return st.builds(form, lists, st.sampled_from(["list", "tuple", "numpy", "torch", "torch-2d", "torch-strided",
                                                   "str"]),
                     st.sampled_from(["int64", "int32", "float64", "bool", "uint8"]))


grids = st.one_of(
    st.none(),
    st.lists(st.tuples(small, small, small), max_size=4).map(lambda rows: [list(r) for r in rows]),
    st.lists(st.tuples(small, small, small), max_size=4).map(lambda rows: torch.tensor(rows, dtype=torch.int64).reshape(-1, 3)),
    arrays(),
)


@pytest.fixture(scope="module")
def meter():
    m = flopmeter.Meter(model="qwen3_vl_2b", peak={"gpu": "H100 SXM"}, sinks={"console": False})
    yield m
    m.close()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(["document_lengths", "cu_seqlens", "position_ids", None]), batch=arrays(), grid=grids,
       padding=scalars, samples=scalars, loss=scalars, labels=scalars)
def test_random_arguments_count_or_raise_a_named_error(meter, fmt, batch, grid, padding, samples, loss, labels):
    kwargs = {"grid_thw": grid, "padding_tokens": padding, "samples": samples, "loss_sum": loss,
              "label_tokens": labels}
    if fmt is not None:
        kwargs[fmt] = batch
    model = meter.model
    before = meter.health["bad_microbatches"]
    try:
        counted = meter.on_microbatch(**kwargs)
    except (TypeError, ValueError) as e:
        assert any(name in str(e) for name in ARGUMENT_NAMES), str(e)
        # Refused in Python: nothing reached the library. Refused by the library: counted as bad, nowhere else.
        assert meter.health["bad_microbatches"] - before in (0, 1)
        return
    assert counted is True
    # Counted: the FLOP model accepts the same batch description.
    model.flops(**{k: v for k, v in kwargs.items() if k in ("document_lengths", "cu_seqlens", "position_ids",
                                                            "grid_thw", "padding_tokens")})


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(min_value=0, max_value=10**6), max_size=20),
       grid_rows=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 64), st.integers(1, 64)), max_size=6))
def test_lengths_cu_seqlens_and_positions_agree(lengths, grid_rows):
    m = flopmeter.FlopModel("qwen3_vl_2b")
    g = [[t, 2 * h, 2 * w] for t, h, w in grid_rows]  # spatial_merge_size 2
    cu = [0]
    for L in lengths:
        cu.append(cu[-1] + L)
    by_lengths = m.flops(document_lengths=lengths, grid_thw=g)
    assert m.flops(cu_seqlens=np.array(cu), grid_thw=torch.tensor(g, dtype=torch.int64).reshape(-1, 3)) == by_lengths
    if sum(lengths) <= 20000:
        positions = torch.cat([torch.arange(L) for L in lengths if L] or [torch.zeros(0, dtype=torch.int64)])
        assert m.flops(position_ids=positions, grid_thw=g) == by_lengths


# ---- attention windows -------------------------------------------------------------------------------------------

def _brute_force_window_pairs(lengths, window):
    """Every (query i, key j) of each document, kept by the mask's own rule: sliding w, i - w < j <= i; chunked c,
    j <= i within the same chunk of c tokens (METRICS.md)."""
    kind, size = window
    pairs = 0
    for length in lengths:
        for i in range(length):
            for j in range(i + 1):
                pairs += (j > i - size) if kind == "sliding" else (j // size == i // size)
    return pairs


windows_strategy = st.tuples(st.sampled_from(["sliding", "chunked"]), st.integers(min_value=1, max_value=40))


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.integers(min_value=0, max_value=60), max_size=8),
       windows=st.lists(windows_strategy, min_size=1, max_size=2))
def test_device_window_counts_from_lengths_cu_seqlens_and_positions_equal_the_brute_force(lengths, windows):
    from flopmeter import _device

    slots = _device.Slots()
    cu = [0]
    for length in lengths:
        cu.append(cu[-1] + length)
    formats = {"document_lengths": torch.tensor(lengths, dtype=torch.int64),
               "cu_seqlens": torch.tensor(cu, dtype=torch.int32)}
    if all(lengths):  # positions cannot hold an empty document
        formats["position_ids"] = torch.cat([torch.arange(n) for n in lengths] or [torch.zeros(0, dtype=torch.int64)])
    for fmt, batch in formats.items():
        counts = _device.batch_counts(torch, fmt, batch, None, 0, 1, torch.device("cpu"), slots, windows)
        assert int(counts[slots.invalid]) == 0
        for k, window in enumerate(windows):
            want = _brute_force_window_pairs(lengths, window)
            assert int(counts[slots.index[f"window_pairs_{k}"]]) == want, (fmt, window)
            assert int(counts[slots.index[f"itemless_window_pairs_{k}"]]) == want, (fmt, window)


def test_shipped_models_with_windows_count_alike_on_the_host_and_the_device(shipped):
    """Every shipped model that has attention windows: the library's counts (C, closed form and SIMD scan) equal
    the device path's for the same random batches, in each format."""
    from flopmeter import _device

    rng = np.random.default_rng(20261203)
    slots = _device.Slots()
    windowed = [name for name in shipped if flopmeter.FlopModel(name).windows]
    if not windowed:
        pytest.skip("no shipped model has attention windows yet")
    for name in windowed:
        model = flopmeter.FlopModel(name)
        for _ in range(20):
            lengths = [int(x) for x in rng.integers(1, 9000, size=int(rng.integers(1, 6)))]
            cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            positions = np.concatenate([np.arange(n) for n in lengths]).astype(np.int64)
            host = model.counts(document_lengths=lengths)
            assert model.counts(cu_seqlens=cu) == host
            assert model.counts(position_ids=positions) == host
            for fmt, batch in (("cu_seqlens", torch.from_numpy(cu)), ("position_ids", torch.from_numpy(positions))):
                counts = _device.batch_counts(torch, fmt, batch, None, 0, 1, torch.device("cpu"), slots,
                                              model.windows)
                assert {k: int(counts[slots.index[k]]) for k in host} == host, (name, fmt)
