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
    """The (query i, key j) pairs of each document under the mask's own rule, query by query: sliding w keeps
    i - w < j <= i, so query i has min(i + 1, w) keys; chunked c keeps j <= i in i's chunk of c tokens, so query i
    has i mod c + 1 keys (METRICS.md)."""
    kind, size = window
    pairs = 0
    for length in lengths:
        for i in range(length):
            pairs += min(i + 1, size) if kind == "sliding" else i % size + 1
    return pairs


def test_shipped_models_with_windows_count_each_window_as_its_mask_does(shipped):
    """Every shipped model that has attention windows: the library's one counter (closed form and SIMD scan) gives
    each window's pairs as the mask's rule does, query by query, for random packed rows whose documents are shorter
    than, equal to and longer than the windows, in each format of the batch."""
    rng = np.random.default_rng(20261203)
    windowed = [name for name in shipped if flopmeter.FlopModel(name).windows]
    if not windowed:
        pytest.skip("no shipped model has attention windows yet")
    for name in windowed:
        model = flopmeter.FlopModel(name)
        sizes = [size for _, size in model.windows]
        for _ in range(6):
            lengths = [int(x) for x in rng.integers(1, 2 * max(sizes) + 2, size=int(rng.integers(1, 4)))]
            lengths += sizes  # a document exactly as long as each window
            cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            positions = np.concatenate([np.arange(n) for n in lengths]).astype(np.int64)
            host = model.counts(document_lengths=lengths)
            assert model.counts(cu_seqlens=cu) == host, name
            assert model.counts(position_ids=positions) == host, name
            for k, window in enumerate(model.windows):
                assert host[f"window_pairs_{k}"] == _brute_force_window_pairs(lengths, window), (name, window)
