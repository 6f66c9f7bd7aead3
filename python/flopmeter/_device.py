"""Counting micro-batches where their tensors live (CUDA), with torch ops and without a sync.

The counts are the host path's, formed as the C++ tensor path forms them (plugin/tensor/torch_path.cpp):
- each document's or item's count in int64 within bounds that keep it exact (a document of at most
  2^32 - 1 tokens: L(L+1)/2 < 2^63, halving the even factor first; an item of at most 2^31 patches:
  P^2 <= 2^62); larger entries are invalid;
- sums over documents, items and micro-batches in float64: exact below 2^53 and never wrapping (an interval
  that reaches 2^53 is refused by every rank when the row is derived, as on the host path).
A malformed batch (cu_seqlens not starting at 0 or decreasing, positions that do not restart at 0 or step by
1, a grid entry < 1 or not divisible by the merge size or not a whole tile, label tokens above the real tokens) is found on the
device: everything it contributes is multiplied by 0 and it is counted as rejected, which reaches
``health['bad_microbatches']`` one log later, in the log's collective.

At each log the accumulated values are added into this rank's row of the collective buffer on the device
(``contribute``), and the interval starts again. A log that starts no collective (the library is backing off
or getting the ranks back in step) still ends the interval: its tokens and samples join the running totals
and the rest is dropped (``end_interval``), as in the C++ tensor path.

Thread-safety: the Meter calls these under its own lock.
"""

from __future__ import annotations

from typing import Any, Optional

from . import _native

MAX_DOCUMENT_TOKENS = (1 << 32) - 1
MAX_ITEM_PATCHES = 1 << 31

# The accumulator's slots: the row's counts (flopmeter_counts' fourteen, then the device tokens, causal pairs and
# window pairs of the micro-batches without images), then these.
COUNTS = 18
INVALID = 18
LABEL_TOKENS = 19
SAMPLES = 20
LOSS_SUM = 21
TOKENS_SQUARED = 22        # sum over micro-batches of S^2, S = its device tokens (the Megatron constant's text
TOKENS_TIMES_PATCHES = 23  # attention grows with it), and of S x its patches (its ViT attention)
SLOTS = 24


class VisionGeometry:
    """The vision tower's segment layout (the library's vision_geometry, from the coefficients' JSON): the merge
    size, Qwen2.5-VL's window edge in merged tokens, InternViT's CLS tokens per segment, the side a tiled model's
    segments must have, and whether Gemma 3's image blocks are counted."""

    def __init__(self, spatial_merge_size: int = 1, vision_window: int = 0, cls_tokens: int = 0,
                 segment_side: int = 0, image_block: bool = False) -> None:
        self.spatial_merge_size = spatial_merge_size
        self.vision_window = vision_window
        self.cls_tokens = cls_tokens
        self.segment_side = segment_side
        self.image_block = image_block

    @classmethod
    def from_coefficients(cls, coefficients: Any) -> "VisionGeometry":
        g = coefficients.get("vision_geometry") or {}
        return cls(int(g.get("spatial_merge_size", 1)), int(g.get("vision_window", 0)), int(g.get("cls_tokens", 0)),
                   int(g.get("segment_side", 0)), bool(g.get("image_block", False)))


def _causal_pairs(torch: Any, lengths: Any) -> Any:
    """L(L+1)/2 per entry, exact for 0 <= L <= 2^32 - 1: the even factor is halved before the product."""
    following = lengths + 1
    return torch.where(lengths.remainder(2) == 0, torch.div(lengths, 2, rounding_mode="floor") * following,
                       lengths * torch.div(following, 2, rounding_mode="floor"))


def batch_counts(torch: Any, fmt: Optional[str], batch: Any, grids: Any, padding_tokens: int,
                 geometry: VisionGeometry, device: Any) -> Any:
    """A float64 tensor of the row's COUNTS counts and the number of invalid entries on `device`."""
    f64 = torch.float64
    zero = torch.zeros((), dtype=f64, device=device)
    real = documents = pairs = invalid = zero
    lengths = None
    if fmt == "cu_seqlens" and batch.numel() > 0:
        cu = batch.to(torch.int64)
        invalid = invalid + (cu[0] != 0).to(f64)
        lengths = cu[1:] - cu[:-1]
    elif fmt == "document_lengths" and batch.numel() > 0:
        lengths = batch.to(torch.int64)
    if lengths is not None:
        documents = torch.full((), lengths.numel(), dtype=f64, device=device)
        invalid = invalid + (lengths < 0).sum().to(f64) + (lengths > MAX_DOCUMENT_TOKENS).sum().to(f64)
        safe = lengths.clamp(0, MAX_DOCUMENT_TOKENS)
        real = safe.to(f64).sum()
        pairs = _causal_pairs(torch, safe).to(f64).sum()
    if fmt == "position_ids" and batch.numel() > 0:
        p = batch.to(torch.int64)
        n = p.numel()
        real = torch.full((), n, dtype=f64, device=device)
        documents = (p == 0).sum().to(f64)
        # Position p makes its document at least p + 1 tokens long.
        invalid = invalid + (p[0] != 0).to(f64) + (p >= MAX_DOCUMENT_TOKENS).sum().to(f64)
        if n > 1:
            current, previous = p[1:], p[:-1]
            invalid = invalid + ((current != 0) & (current != previous + 1)).sum().to(f64)
        # sum(positions + 1) is L(L+1)/2 per document once the runs are valid.
        pairs = (p.clamp(0, MAX_DOCUMENT_TOKENS - 1) + 1).to(f64).sum()

    items = patches = merged = per_frame = whole = window = cls_tokens = block = zero
    if grids is not None and grids.numel() > 0:
        grid = grids.to(torch.int64)
        m = geometry.spatial_merge_size
        c = geometry.cls_tokens
        t, h, w = grid[:, 0], grid[:, 1], grid[:, 2]
        # Bounds first, in double, so that no int64 product below can overflow.
        too_large = (t.to(f64) * h.to(f64) * w.to(f64)) > float(MAX_ITEM_PATCHES)
        row_bad = (grid < 1).any(1) | (h.remainder(m) != 0) | (w.remainder(m) != 0) | too_large
        if geometry.segment_side > 0:  # a tiled model's segment is one whole tile
            row_bad = row_bad | (h != geometry.segment_side) | (w != geometry.segment_side)
        invalid = invalid + row_bad.sum().to(f64)
        ok = (~row_bad).to(torch.int64)
        # Invalid rows are replaced by (1, m, m) and masked out, so their products stay small.
        ts = torch.where(row_bad, torch.ones_like(t), t)
        hs = torch.where(row_bad, torch.full_like(h, m), h)
        ws = torch.where(row_bad, torch.full_like(w, m), w)
        frame = hs * ws
        item_patches = ts * frame
        items = torch.full((), grid.shape[0], dtype=f64, device=device)
        patches = (item_patches * ok).to(f64).sum()
        merged = (torch.div(item_patches, m * m, rounding_mode="floor") * ok).to(f64).sum()
        per_frame = (ts * (frame + c) * (frame + c) * ok).to(f64).sum()
        whole = (item_patches * item_patches * ok).to(f64).sum()
        # The closed forms of the host path (core/batch_counts.cpp add_vision_extras), per segment times t.
        if geometry.vision_window > 0:
            v = geometry.vision_window
            big_h, big_w = torch.div(hs, m, rounding_mode="floor"), torch.div(ws, m, rounding_mode="floor")
            rows = torch.div(big_h, v, rounding_mode="floor") * v * v + big_h.remainder(v) ** 2
            cols = torch.div(big_w, v, rounding_mode="floor") * v * v + big_w.remainder(v) ** 2
            window = (ts * (m * m * rows) * (m * m * cols) * ok).to(f64).sum()
        if c > 0:
            cls_tokens = (ts * c * ok).to(f64).sum()
        if geometry.image_block:
            n = torch.div(frame, m * m, rounding_mode="floor")
            block = (ts * torch.div(n * (n - 1), 2, rounding_mode="floor") * ok).to(f64).sum()
    padding = torch.full((), padding_tokens, dtype=f64, device=device)
    # A micro-batch without images (known on the host: no grid rows) carries its text work in the itemless
    # counts too, which a frozen decoder bills by other coefficients.
    has_items = grids is not None and grids.numel() > 0
    itemless_tokens = zero if has_items else real + padding
    itemless_pairs = zero if has_items else pairs
    return torch.stack([real, padding, documents, pairs, items, patches, merged, per_frame, whole, zero, zero,
                        window, cls_tokens, block, itemless_tokens, itemless_pairs, zero, zero, invalid])


def _device_scalar(torch: Any, value: Any, device: Any) -> Any:
    """`value` (a tensor on `device`, or a Python number) as a 0-d float64 tensor there, without a sync:
    torch.as_tensor(3.5, device="cuda") copies from the host and waits for the copy (a sync that
    set_sync_debug_mode("error") refuses); torch.full writes the number with a fill kernel instead."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype=torch.float64).reshape(())
    return torch.full((), float(value), dtype=torch.float64, device=device)


class DeviceCounts:
    """This rank's interval accumulators on one device, and its running totals there."""

    def __init__(self, torch: Any, device: Any, geometry: VisionGeometry) -> None:
        self.torch = torch
        self.device = device
        self.geometry = geometry
        self.accumulated = torch.zeros(SLOTS, dtype=torch.float64, device=device)
        self.seen = torch.zeros(3, dtype=torch.float64, device=device)  # real tokens, samples, label tokens

    def add(self, fmt: Optional[str], batch: Any, grids: Any, padding_tokens: int, samples: int,
            loss_sum: Any, label_tokens: Any) -> None:
        """Adds one micro-batch, masked by its validity; no value is read back."""
        torch = self.torch
        counts = batch_counts(torch, fmt, batch, grids, padding_tokens, self.geometry, self.device)
        valid = (counts[INVALID] == 0).to(torch.float64)
        if label_tokens is not None:
            labels = _device_scalar(torch, label_tokens, self.device)
            # More label tokens than real tokens is refused on the host path; here both are on the device.
            valid = valid * (counts[0] >= labels).to(torch.float64)
            loss = _device_scalar(torch, loss_sum, self.device)
            valid = valid * torch.isfinite(loss).to(torch.float64)
            self.accumulated[LABEL_TOKENS] += valid * labels
            self.accumulated[LOSS_SUM] += torch.where(valid > 0, loss, torch.zeros_like(loss))
        self.accumulated[:INVALID] += counts[:INVALID] * valid
        self.accumulated[INVALID] += 1 - valid
        self.accumulated[SAMPLES] += valid * float(samples)
        # The sums the Megatron constant's attention parts grow with, per micro-batch of S device tokens.
        row_tokens = counts[0] + counts[1]
        self.accumulated[TOKENS_SQUARED] += valid * (row_tokens * row_tokens)
        self.accumulated[TOKENS_TIMES_PATCHES] += valid * (row_tokens * counts[5])

    def reject(self) -> None:
        """A micro-batch refused on the host (a bad shape or dtype) still counts as rejected, on the device."""
        self.accumulated[INVALID] += 1

    def contribute(self, host_row_buffer: Any, rank: int, layout: _native.RowLayout) -> Any:
        """The collective buffer on the device: the host buffer plus this interval's device values in this
        rank's row. Starts the next interval."""
        torch = self.torch
        if self.device.type == "cpu":
            buffer = host_row_buffer.clone()
        else:
            # A fresh pinned copy each log: torch's pinned-memory allocator keeps the block until the
            # non-blocking copy that reads it has run on the device, however far the device lags behind.
            buffer = host_row_buffer.pin_memory().to(self.device, non_blocking=True)
        row = rank * layout.row_doubles
        a = self.accumulated
        if layout.num_counts != COUNTS:
            raise RuntimeError(f"the library's row has {layout.num_counts} counts, this package counts {COUNTS}")
        buffer[row + layout.counts: row + layout.counts + COUNTS] += a[:COUNTS]
        buffer[row + layout.device_rejected] += a[INVALID]
        buffer[row + layout.label_tokens] += a[LABEL_TOKENS]
        buffer[row + layout.loss_sum] += a[LOSS_SUM]
        # In the host path's order of operations (derive.h, megatron_billing::interval_flops): the same double.
        tokens = a[0] + a[1]
        buffer[row + layout.megatron_flops] += (tokens * layout.megatron_text_linear
                                                + a[TOKENS_SQUARED] * layout.megatron_text_attention_slope
                                                + a[5] * layout.megatron_vision_linear
                                                + a[TOKENS_TIMES_PATCHES] * layout.megatron_vision_attention_slope)
        self.seen[0] += a[0]
        self.seen[1] += a[SAMPLES]
        self.seen[2] += a[LABEL_TOKENS]
        buffer[row + layout.tokens_seen] += self.seen[0]
        buffer[row + layout.samples_seen] += self.seen[1]
        buffer[row + layout.label_tokens_seen] += self.seen[2]
        self.accumulated.zero_()
        return buffer

    def end_interval(self) -> None:
        """A log without a collective: tokens and samples join the running totals, the rest is dropped, and
        device rejections wait for the next row."""
        a = self.accumulated
        self.seen[0] += a[0]
        self.seen[1] += a[SAMPLES]
        self.seen[2] += a[LABEL_TOKENS]
        rejected = a[INVALID].clone()
        a.zero_()
        a[INVALID] = rejected
