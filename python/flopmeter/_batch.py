"""Batch arguments: torch tensors, NumPy arrays or Python sequences of ints, checked and handed to C by pointer.

A host array (a CPU tensor, a NumPy array, a list) is passed to the C library where it lies, without a copy
when it is already contiguous int64 (int32 positions too); other integer dtypes are widened once. Anything
that is not integers (floats, bools), not 1-D (``[items, 3]`` for grids), or negative where a count belongs
raises ``TypeError`` or ``ValueError`` naming the argument, before anything is counted. Tensors on an
accelerator are not read here: ``is_device_tensor`` says so and ``Meter`` copies them to the host first
(_device_path.py).

Thread-safety: pure functions; the arrays they return keep the data alive for the duration of one call.
"""

from __future__ import annotations

import array
import math
import numbers
import sys
import warnings
from typing import Any, Optional, Tuple

from . import _native

BATCH_ARGUMENTS = ("document_lengths", "cu_seqlens", "position_ids")
INT64_MAX = 2**63 - 1
# Meter.on_microbatch's fast path for plain CPU tensors, in C (flopmeter/_fastpath.c), when the package was built
# with Python's headers: the same counts as the general path, which the tests check by turning it off (FAST_PATH);
# they also turn it off to run the device path on CPU tensors.
FAST_PATH = True
try:
    from . import _fastpath
except ImportError:  # built without Python's development headers: every call takes the general path
    _fastpath = None  # type: ignore[assignment]
NATIVE_FAST_PATH = _fastpath is not None

# (torch.Tensor, torch.int64, torch.int32, torch.strided) once the trainer has imported torch: what Meter's fast path
# compares against (looked up in sys.modules, so that flopmeter never imports torch itself).
torch_facts: Optional[Tuple[Any, Any, Any, Any]] = None


def load_torch_facts() -> Optional[Tuple[Any, Any, Any, Any]]:
    """Sets and returns `torch_facts`, or None while torch is not imported."""
    global torch_facts
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "int32"):  # not imported, or still importing
        return None
    torch_facts = (torch.Tensor, torch.int64, torch.int32, torch.strided)
    return torch_facts


class HostArray:
    """An integer array in host memory: its address, length, element width, and what keeps it alive."""

    __slots__ = ("address", "length", "bits", "owner", "rows")

    def __init__(self, address: int, length: int, bits: int, owner: Any, rows: int = 0) -> None:
        self.address = address
        self.length = length
        self.bits = bits
        self.owner = owner
        self.rows = rows


def _is_torch_tensor(value: Any) -> bool:
    module = type(value).__module__
    return module.startswith("torch") and hasattr(value, "data_ptr")


def _is_numpy_array(value: Any) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "__array_interface__")


def is_device_tensor(value: Any) -> bool:
    """A torch tensor whose memory is not the host's (CUDA or another accelerator)."""
    return value is not None and _is_torch_tensor(value) and value.device.type != "cpu"


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _torch_array(name: str, t: Any, want_rows: bool, allow_int32: bool) -> HostArray:
    import torch  # already imported by the caller: t is a torch tensor

    if t.dtype == torch.bool or t.is_floating_point() or t.is_complex():
        raise TypeError(f"{name} must have an integer dtype, got {t.dtype}")
    if t.layout != torch.strided:  # a sparse tensor has no data pointer to read
        raise TypeError(f"{name} must be a dense tensor, got layout {t.layout}")
    if want_rows:
        if t.dim() != 2 or t.shape[1] != 3:
            raise ValueError(f"{name} must have shape [items, 3], got shape {_shape_text(t.shape)}")
    elif t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {_shape_text(t.shape)}")
    if t.dtype == torch.int64 or (allow_int32 and t.dtype == torch.int32):
        if not t.is_contiguous():
            t = t.contiguous()
    else:
        t = t.to(torch.int64).contiguous()
    bits = 32 if t.dtype == torch.int32 else 64
    rows = int(t.shape[0]) if want_rows else 0
    return HostArray(t.data_ptr(), t.numel(), bits, t, rows)


def _numpy_array(name: str, a: Any, want_rows: bool, allow_int32: bool) -> HostArray:
    import numpy as np

    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype, got {a.dtype}")
    if want_rows:
        if a.ndim != 2 or a.shape[1] != 3:
            raise ValueError(f"{name} must have shape [items, 3], got shape {_shape_text(a.shape)}")
    elif a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {_shape_text(a.shape)}")
    if a.dtype.kind == "u" and a.size and int(a.max()) > 2**63 - 1:
        raise ValueError(f"{name} has an entry above 2^63 - 1")
    if allow_int32 and a.dtype == np.int32:
        a = np.ascontiguousarray(a)
        return HostArray(a.ctypes.data, a.size, 32, a, a.shape[0] if want_rows else 0)
    a = np.ascontiguousarray(a, dtype=np.int64)
    return HostArray(a.ctypes.data, a.size, 64, a, a.shape[0] if want_rows else 0)


def _sequence_array(name: str, value: Any, want_rows: bool) -> HostArray:
    if isinstance(value, (str, bytes, bytearray)) or not hasattr(value, "__len__"):
        raise TypeError(
            f"{name} must be a torch tensor, a NumPy array or a sequence of ints, got {type(value).__name__}"
        )
    flat = []
    if want_rows:
        for i, row in enumerate(value):
            if isinstance(row, (str, bytes)) or not hasattr(row, "__len__") or len(row) != 3:
                raise ValueError(f"{name} must have shape [items, 3]: entry {i} is {row!r}")
            flat.extend(row)
    else:
        flat = list(value)
    for i, x in enumerate(flat):
        # bool is an int in Python; a count is not a truth value.
        if isinstance(x, bool) or not isinstance(x, numbers.Integral):
            where = f"entry {i // 3}, {('t', 'h', 'w')[i % 3]}" if want_rows else f"entry {i}"
            raise TypeError(f"{name} must hold ints: {where} is {x!r} ({type(x).__name__})")
    try:
        data = array.array("q", flat)
    except OverflowError:
        raise ValueError(f"{name} has an entry outside the 64-bit integer range") from None
    address = data.buffer_info()[0] if len(data) else 0
    return HostArray(address, len(data), 64, data, len(flat) // 3 if want_rows else 0)


def host_array(name: str, value: Any, *, want_rows: bool = False, allow_int32: bool = False) -> HostArray:
    """`value` as a host integer array, or TypeError/ValueError naming `name`."""
    if _is_torch_tensor(value):
        if value.device.type != "cpu":
            raise ValueError(f"{name} is on {value.device}; this path reads host memory only")
        return _torch_array(name, value, want_rows, allow_int32)
    if _is_numpy_array(value):
        return _numpy_array(name, value, want_rows, allow_int32)
    return _sequence_array(name, value, want_rows)


def count_argument(name: str, value: Any, *, minimum: int = 0) -> int:
    """An int >= minimum (a Python int, a NumPy integer or a 0-d integer tensor on the host)."""
    if _is_torch_tensor(value) or _is_numpy_array(value):
        if getattr(value, "ndim", value.dim() if hasattr(value, "dim") else 0) != 0:
            raise ValueError(f"{name} must be a scalar, got shape {_shape_text(value.shape)}")
        if _is_torch_tensor(value) and (value.is_floating_point() or value.dtype.is_complex or str(value.dtype) == "torch.bool"):
            raise TypeError(f"{name} must be an int, got a {value.dtype} tensor")
        if _is_numpy_array(value) and value.dtype.kind not in "iu":
            raise TypeError(f"{name} must be an int, got a {value.dtype} array")
        value = int(value.item())
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > 2**63 - 1:
        raise ValueError(f"{name} must fit in 64 bits, got {value}")
    return value


def float_argument(name: str, value: Any) -> float:
    """A finite float (a Python number, a NumPy scalar or a 0-d host tensor)."""
    if _is_torch_tensor(value) or _is_numpy_array(value):
        shape = tuple(value.shape)
        if shape not in ((), (1,)):
            raise ValueError(f"{name} must be a scalar, got shape {_shape_text(shape)}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def one_batch_format(document_lengths: Any, cu_seqlens: Any, position_ids: Any) -> Tuple[Optional[str], Any]:
    """Which of the three descriptions is given (at most one), and its value."""
    given = [(n, v) for n, v in (("document_lengths", document_lengths), ("cu_seqlens", cu_seqlens),
                                 ("position_ids", position_ids)) if v is not None]
    if len(given) > 1:
        names = ", ".join(n for n, _ in given)
        raise ValueError(f"give one of document_lengths, cu_seqlens, position_ids, not {names}")
    return given[0] if given else (None, None)


def fill_microbatch(mb: _native.Microbatch, fmt: Optional[str], batch: Optional[HostArray],
                    grids: Optional[HostArray], padding_tokens: int) -> None:
    """Points `mb` at the arrays (the caller keeps them alive during the call)."""
    mb.document_lengths = None
    mb.num_document_lengths = 0
    mb.cu_seqlens = None
    mb.num_cu_seqlens = 0
    mb.positions = None
    mb.num_positions = 0
    mb.positions_int32 = None
    mb.num_positions_int32 = 0
    if batch is not None and batch.length > 0:
        if fmt == "document_lengths":
            mb.document_lengths = batch.address
            mb.num_document_lengths = batch.length
        elif fmt == "cu_seqlens":
            mb.cu_seqlens = batch.address
            mb.num_cu_seqlens = batch.length
        elif batch.bits == 32:
            mb.positions_int32 = batch.address
            mb.num_positions_int32 = batch.length
        else:
            mb.positions = batch.address
            mb.num_positions = batch.length
    if grids is not None and grids.rows > 0:
        mb.grids = grids.address
        mb.num_grids = grids.rows
    else:
        mb.grids = None
        mb.num_grids = 0
    mb.padding_tokens = padding_tokens


def renamed_grid_thw(grid_thw: Any, image_grid_thw: Any, stacklevel: int = 3) -> Any:
    """``image_grid_thw=``, the name of ``grid_thw=`` before 0.3: still taken, with a FutureWarning at the
    caller's line; both at once is a TypeError (one would be dropped)."""
    if grid_thw is not None:
        raise TypeError("give grid_thw or its deprecated name image_grid_thw, not both")
    warnings.warn("image_grid_thw= is deprecated: write grid_thw= (the items, images and videos, as [items, 3] "
                  "rows t, h, w)", FutureWarning, stacklevel=stacklevel)
    return image_grid_thw
