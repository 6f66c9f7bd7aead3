"""A Meter's micro-batches given as tensors on a device: checked on the host, copied, counted when they arrive.

What is known without reading the tensors (their kind, dtype, rank and shape, the device they are on, the
host numbers) is checked at once and raises ``TypeError`` or ``ValueError`` naming the argument, as on the host
path. The arrays are then copied to the host (``_device_queue.copy_to_host``) and the micro-batch is counted,
when its copy has arrived, by the library's one host counter: the same call, the same counts and FLOPs, the
same refusals as a host micro-batch. A refusal found then (cu_seqlens not starting at 0, a bad grid, label
tokens above the real tokens, ...) cannot be raised from the call that queued it; it is counted in
``health['bad_microbatches']`` by the library and logged to the "flopmeter" logger with the reason the host
path would have raised, one warning a minute at most.

Thread-safety: none of its own; the Meter calls it under its lock.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Tuple

from . import _batch, _device_queue, _native

logger = logging.getLogger("flopmeter")
WARNING_INTERVAL_S = 60.0  # refusals found on arrival: one warning a minute at most


def check_device_batch(fmt: Optional[str], value: Any, grid_thw: Any, padding_tokens: Any, samples: Any,
                       loss_sum: Any, label_tokens: Any) -> Tuple[Any, int, int]:
    """(device, padding_tokens, samples) of a micro-batch with tensors on a device, or TypeError / ValueError
    naming the argument that is not what it must be."""
    import torch

    tensors = [("grid_thw", grid_thw)] if grid_thw is not None else []
    if fmt is not None:
        tensors.insert(0, (fmt, value))
    devices = {}
    for name, t in tensors:
        if not _batch._is_torch_tensor(t):
            raise TypeError(f"{name}: with tensors on a device, give every batch array as a tensor on it "
                            f"(got {type(t).__name__})")
        if t.dtype == torch.bool or t.is_floating_point() or t.is_complex():
            raise TypeError(f"{name} must have an integer dtype, got {t.dtype}")
        if t.layout != torch.strided:
            raise TypeError(f"{name} must be a dense tensor, got layout {t.layout}")
        if name == "grid_thw":
            if t.dim() != 2 or t.shape[1] != 3:
                raise ValueError(f"{name} must have shape [items, 3], got shape {_batch._shape_text(t.shape)}")
        elif t.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {_batch._shape_text(t.shape)}")
        devices[name] = t.device
    padding = _batch.count_argument("padding_tokens", padding_tokens)
    samples = _batch.count_argument("samples", samples)
    if (loss_sum is None) != (label_tokens is None):
        raise ValueError("give loss_sum and label_tokens together (the loss is their ratio)")
    for name, scalar in (("loss_sum", loss_sum), ("label_tokens", label_tokens)):
        if _batch._is_torch_tensor(scalar):
            if scalar.numel() != 1:
                raise ValueError(f"{name} must be a scalar, got shape {_batch._shape_text(scalar.shape)}")
            if name == "label_tokens" and (scalar.is_floating_point() or scalar.dtype == torch.bool):
                raise TypeError(f"label_tokens must be an integer, got a {scalar.dtype} tensor")
            devices[name] = scalar.device
        elif scalar is not None:
            if name == "loss_sum":
                _batch.float_argument(name, scalar)
            else:
                _batch.count_argument(name, scalar)
    # The device of the batch arrays (a CPU tensor reaches here only in tests that run this path on the host).
    device = next(iter(devices.values()))
    for name, d in devices.items():
        if d != device:
            raise ValueError(f"{name} is on {d}, the batch's other tensors on {device}")
    return device, padding, samples


def _host_scalar(value: Any) -> Any:
    """A loss sum or label count as a Python number: a one-element host tensor's value, or the number given."""
    return value.item() if hasattr(value, "item") and hasattr(value, "numel") else value


class DeviceMicrobatches:
    """The queue of one Meter's device micro-batches (one device per Meter), counted on arrival through
    `count_host(fmt, batch, grids, padding, samples, has_loss, loss, labels) -> (code, reason)` (the Meter's
    host call, which returns the message of a refusal with the library's reason)."""

    def __init__(self, device: Any, count_host: Callable[..., Tuple[int, str]], *,
                 capacity: int = _device_queue.DEFAULT_CAPACITY,
                 wait_seconds: float = _device_queue.DEFAULT_WAIT_SECONDS) -> None:
        self.device = device
        self._count_host = count_host
        self.queue = _device_queue.CopyQueue(self._count_arrived, self._give_up, capacity=capacity,
                                             wait_seconds=wait_seconds)
        self.lost = 0  # micro-batches whose copy did not arrive within the bound (health: lost_device_microbatches)
        self._next_warning = 0.0
        self._held_back = 0

    @property
    def pending(self) -> int:
        return len(self.queue)

    def put(self, device: Any, fmt: Optional[str], batch: Any, grids: Any, loss_sum: Any, label_tokens: Any,
            padding_tokens: int, samples: int) -> None:
        """Queues the copy of one checked micro-batch, then counts whatever has arrived."""
        import torch

        if device != self.device:
            raise ValueError(f"the batch is on {device}, this meter counts on {self.device} (one device per meter)")
        try:
            copied = _device_queue.copy_to_host(torch, device, fmt, batch, grids, loss_sum, label_tokens,
                                                padding_tokens, samples)
        except Exception as e:  # noqa: BLE001 - a device whose tensors cannot be copied to the host
            raise ValueError(f"{fmt or 'grid_thw'}: tensors on {device} cannot be copied to the host ({e})") from e
        self.queue.put(*copied)
        self.queue.poll()

    def poll(self) -> None:
        self.queue.poll()

    def drain(self) -> None:
        if len(self.queue):
            self.queue.drain()

    def _count_arrived(self, entry: _device_queue.DeviceBatch) -> None:
        """Counts a micro-batch whose arrays are in host memory, as a host one. Never raises: it runs inside
        other hooks."""
        try:
            self._count_or_refuse(entry)
        except Exception as e:  # noqa: BLE001 - nothing may reach the training loop from a later hook
            self._warn(entry, f"not counted: {e}")

    def _count_or_refuse(self, entry: _device_queue.DeviceBatch) -> None:
        try:
            fmt = entry.fmt
            batch = None if entry.batch is None else _batch.host_array(fmt, entry.batch,
                                                                       allow_int32=fmt == "position_ids")
            grids = None if entry.grids is None else _batch.host_array("grid_thw", entry.grids, want_rows=True)
            has_loss = entry.loss_sum is not None
            loss, labels = 0.0, 0
            if has_loss:
                loss = _batch.float_argument("loss_sum", _host_scalar(entry.loss_sum))
                labels = _batch.count_argument("label_tokens", _host_scalar(entry.label_tokens))
        except (TypeError, ValueError) as e:  # a negative label count read from the device, say
            self._count_host(None, None, None, 0, 0, False, 0.0, 0)  # it ran, and counts nothing
            self._warn(entry, f"invalid micro-batch, not counted: {e}")
            return
        code, why = self._count_host(fmt, batch, grids, entry.padding_tokens, entry.samples, has_loss, loss, labels)
        if code == _native.E_REJECTED:
            self._warn(entry, why)

    def _give_up(self, entry: _device_queue.DeviceBatch, waited_s: float) -> None:
        """A micro-batch whose copy did not arrive within the bound: it ran, and counts nothing."""
        self.lost += 1
        self._count_host(None, None, None, 0, 0, False, 0.0, 0)
        self._warn(entry, f"its copy to the host did not arrive within {waited_s:g} s; not counted "
                          "(health['lost_device_microbatches'])")

    def _warn(self, entry: _device_queue.DeviceBatch, reason: str) -> None:
        now = time.monotonic()
        if now < self._next_warning:
            self._held_back += 1
            return
        held, self._held_back = self._held_back, 0
        self._next_warning = now + WARNING_INTERVAL_S
        logger.warning("flopmeter: a micro-batch on %s: %s%s", entry.device, reason,
                       f" ({held} more held back since the last warning)" if held else "")
