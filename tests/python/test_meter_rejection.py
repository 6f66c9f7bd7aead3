"""A micro-batch the library refuses: Meter.on_microbatch raises ValueError with the library's own reason
(flopmeter_on_microbatch_ex), from the C fast path and from the general path, and the micro-batch is counted
exactly once: no second call into the library to explain it."""

from __future__ import annotations

import collections

import pytest

import flopmeter
from flopmeter import _batch, _native

QUIET = {"console": False}


class _CountingLibrary:
    """The loaded library with the calls into its counting entries counted (every other attribute as is)."""

    COUNTING = ("flopmeter_on_microbatch", "flopmeter_on_microbatch_ex", "flopmeter_model_count")

    def __init__(self, library) -> None:
        self._library = library
        self.calls = collections.Counter()

    def __getattr__(self, name):
        attribute = getattr(self._library, name)
        if name not in self.COUNTING:
            return attribute

        def counted(*args):
            self.calls[name] += 1
            return attribute(*args)

        return counted


@pytest.fixture
def counting(monkeypatch):
    library = _CountingLibrary(_native.lib())
    monkeypatch.setattr(_native, "_library", library)
    return library


# (arguments, the library's reason as hand-derived from them). The general path takes document_lengths (the
# C fast path never does) and plain lists.
GENERAL_CASES = [
    # the second document has length -3
    (dict(document_lengths=[2, -3]), "document_lengths[1]: document length must be >= 0 (got -3)"),
    # cu_seqlens [0, 4, 9]: 9 real tokens, 10 label tokens
    (dict(cu_seqlens=[0, 4, 9], loss_sum=2.0, label_tokens=10), "label_tokens 10 exceeds the micro-batch's 9 real"),
    # cu_seqlens must start at 0
    (dict(cu_seqlens=[5, 9]), "cu_seqlens[0] must be 0 (got 5)"),
]


@pytest.mark.parametrize("kwargs, reason", GENERAL_CASES)
def test_the_general_path_raises_the_librarys_reason_after_one_call(counting, monkeypatch, kwargs, reason):
    monkeypatch.setattr(_batch, "FAST_PATH", False)  # every call through ctypes, where it can be counted
    with flopmeter.Meter(model="qwen3_vl_2b", sinks=QUIET, peak={"tflops_per_gpu": 1.0}) as meter:
        with pytest.raises(ValueError) as info:
            meter.on_microbatch(**kwargs)
        assert str(info.value).startswith("invalid micro-batch, not counted (health['bad_microbatches']): ")
        assert reason in str(info.value)
        # One call into the library for this micro-batch, and no count by the FLOP model to explain it.
        assert counting.calls == {"flopmeter_on_microbatch_ex": 1}
        assert meter.health["bad_microbatches"] == 1


@pytest.mark.skipif(not _batch.NATIVE_FAST_PATH, reason="the package was built without its C fast path")
def test_the_c_fast_path_raises_the_librarys_reason_and_counts_once(monkeypatch):
    torch = pytest.importorskip("torch")
    with flopmeter.Meter(model="qwen3_vl_2b", sinks=QUIET, peak={"tflops_per_gpu": 1.0}) as meter:
        assert meter.on_microbatch(cu_seqlens=torch.tensor([0, 4, 9]), samples=2)  # binds the fast path
        counting = _CountingLibrary(_native.lib())
        monkeypatch.setattr(_native, "_library", counting)
        # Plain int64 CPU tensors: the C fast path takes them. cu_seqlens [0, 6, 4] goes backwards at index 2;
        # grid (1, 3, 4) has an odd height for qwen3_vl_2b's 2x2 merge.
        with pytest.raises(ValueError, match=r"^invalid micro-batch, not counted .*cu_seqlens\[2\] = 4"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 6, 4]))
        with pytest.raises(ValueError, match=r"grid_thw\[0\] = \(1, 3, 4\)"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 9]), grid_thw=torch.tensor([[1, 3, 4]]))
        with pytest.raises(ValueError, match="label_tokens 12 exceeds the micro-batch's 9 real tokens"):
            meter.on_microbatch(cu_seqlens=torch.tensor([0, 9]), loss_sum=3.0, label_tokens=12)
        # The fast path called the library itself, once each; Python made no call to explain them.
        assert counting.calls == {}
        assert meter.health["bad_microbatches"] == 3
        meter.on_log(1)
        record = meter.flush()
    assert record["train/tokens_seen"] == 9  # only the first, valid micro-batch
