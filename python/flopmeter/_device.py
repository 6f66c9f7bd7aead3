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
or getting the ranks back in step) still ends the interval: its tokens, samples and FLOPs join the running
totals and the rest is dropped (``end_interval``), as in the C++ tensor path.

train/flops_seen: at the end of each interval, whatever becomes of its collective, the exact model FLOPs of its
counts join this rank's running total on the device, in int64 digits (the library's flops_seen.h, "Device
FLOPs", describes the arithmetic; the weights per count are the library's, flopmeter_row_flops_weight): each
count's 16-bit digits times each weight's 16-bit digits, summed per position (below 2^39), folded into 32-bit
limbs and carried. ``contribute`` adds that total to the host's limbs in this rank's row, carried likewise, so
the row carries the rank's whole exact total, as a host-only rank's does.

Thread-safety: the Meter calls these under its own lock.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple, Union

from . import _native

MAX_DOCUMENT_TOKENS = (1 << 32) - 1
MAX_ITEM_PATCHES = 1 << 31
# Device FLOPs (the library's flops_seen.h): digits of 16 bits, limbs of 32.
COUNT_DIGITS = 4  # a count below 2^64 (the accumulator's are below 2^53)
WEIGHT_DIGITS = 5  # a weight below 2^80 in magnitude (the library's are below 2^66)
PRODUCT_DIGITS = COUNT_DIGITS + WEIGHT_DIGITS - 1  # 4 limbs of 32 bits
FLOPS_LIMBS = 5  # the running total: 4 limbs in [0, 2^32), then the rest
LIMB = 1 << 32
EXACT_INTEGER_LIMIT = float(1 << 53)
# What all three FLOPs limbs of a row say once the rank's total reached 2^96 (c_api.h, flopmeter_row_layout).
FLOPS_SEEN_BEYOND_ROW = -1.0

# A window as the library describes it: ("sliding" | "chunked", size >= 1).
Window = Tuple[str, int]


class Slots:
    """The accumulator's slots: the row's counts in the library's table order (_native.ROW_COUNT_FIELDS: no list
    of counts is kept here), then the invalid micro-batches, label tokens, samples, loss sum and the sums over
    micro-batches of S^2 and S x patches (S = its device tokens: what the Megatron constant's text and ViT
    attention grow with)."""

    def __init__(self) -> None:
        names = _native.ROW_COUNT_FIELDS
        self.index: Dict[str, int] = {name: i for i, name in enumerate(names)}
        self.counts = len(names)
        self.invalid = self.counts
        self.label_tokens = self.counts + 1
        self.samples = self.counts + 2
        self.loss_sum = self.counts + 3
        self.tokens_squared = self.counts + 4
        self.tokens_times_patches = self.counts + 5
        self.total = self.counts + 6


def weight_digit_matrix(weights: Sequence[int]) -> list:
    """Rows ``f * COUNT_DIGITS + i`` (count f's digit i), columns k < PRODUCT_DIGITS: sign(w_f) times digit k - i
    of |w_f| (16 bits each), 0 outside the weight's digits. A count vector's digits times this matrix are the
    FLOPs' digit sums S_k."""
    matrix = [[0] * PRODUCT_DIGITS for _ in range(len(weights) * COUNT_DIGITS)]
    for f, weight in enumerate(weights):
        magnitude = abs(weight)
        if magnitude >> (16 * WEIGHT_DIGITS):
            raise ValueError(f"the FLOPs weight of count {f} ({weight}) reaches 2^80")
        sign = -1 if weight < 0 else 1
        for j in range(WEIGHT_DIGITS):
            digit = (magnitude >> (16 * j)) & 0xFFFF
            for i in range(COUNT_DIGITS):
                matrix[f * COUNT_DIGITS + i][i + j] = sign * digit
    return matrix


def _carry(torch: Any, limbs: Any) -> None:
    """Brings entries 0 .. n-2 of an int64 vector of 32-bit limbs into [0, 2^32), carrying floor(x / 2^32) into
    the next, lowest first; the last keeps the rest. Exact while every entry stays below 2^63 in magnitude."""
    for m in range(limbs.shape[0] - 1):
        carry = torch.div(limbs[m], LIMB, rounding_mode="floor")
        limbs[m] -= carry * LIMB
        limbs[m + 1] += carry


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

    @classmethod
    def of(cls, geometry: Union["VisionGeometry", int]) -> "VisionGeometry":
        """A geometry, or a merge size alone (a tower without windows, CLS tokens or image blocks)."""
        return geometry if isinstance(geometry, VisionGeometry) else cls(int(geometry))


def _causal_pairs(torch: Any, lengths: Any) -> Any:
    """L(L+1)/2 per entry, exact for 0 <= L <= 2^32 - 1: the even factor is halved before the product."""
    following = lengths + 1
    return torch.where(lengths.remainder(2) == 0, torch.div(lengths, 2, rounding_mode="floor") * following,
                       lengths * torch.div(following, 2, rounding_mode="floor"))


def _triangle(torch: Any, m: Any) -> Any:
    """m(m+1)/2 per entry, exact for 0 <= m <= 2^32 - 1 (as _causal_pairs)."""
    return _causal_pairs(torch, m)


def _window_pairs_of_lengths(torch: Any, safe: Any, window: Window) -> Any:
    """Per document of L tokens (0 <= L <= 2^32 - 1), the pairs under `window`, in int64 and exact: every term is
    at most L(L+1)/2 < 2^63 (METRICS.md has the definitions).
    sliding w: m = min(L, w): m(m+1)/2 + (L - m) * m.
    chunked c: q = L // c, r = L % c: q * c(c+1)/2 + r(r+1)/2, with c clamped to 2^32 - 1 (a c >= L is one chunk
    either way, and c(c+1)/2 then fits int64)."""
    kind, size = window
    if kind == "sliding":
        m = safe.clamp(max=size)
        return _triangle(torch, m) + (safe - m) * m
    c = min(size, MAX_DOCUMENT_TOKENS)
    return torch.div(safe, c, rounding_mode="floor") * (c * (c + 1) // 2) + _triangle(torch, safe.remainder(c))


def _window_pairs_of_positions(torch: Any, p: Any, window: Window) -> Any:
    """Per token at position p (clamped to [0, 2^32 - 2] like the causal pairs), the keys it attends:
    min(p + 1, w) (sliding) or (p mod c) + 1 (chunked)."""
    kind, size = window
    q = p.clamp(0, MAX_DOCUMENT_TOKENS - 1)
    return (q + 1).clamp(max=size) if kind == "sliding" else q.remainder(size) + 1


def batch_counts(torch: Any, fmt: Optional[str], batch: Any, grids: Any, padding_tokens: int,
                 merge_size: Union[VisionGeometry, int], device: Any, slots: Slots,
                 windows: Sequence[Window] = ()) -> Any:
    """A float64 tensor of the row's counts (in slots' order) and the number of invalid entries on `device`.
    `merge_size`: the vision tower's VisionGeometry, or its spatial_merge_size alone."""
    geometry = VisionGeometry.of(merge_size)
    f64 = torch.float64
    zero = torch.zeros((), dtype=f64, device=device)
    real = documents = pairs = invalid = zero
    window_pairs = [zero for _ in windows]
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
        window_pairs = [_window_pairs_of_lengths(torch, safe, w).to(f64).sum() for w in windows]
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
        window_pairs = [_window_pairs_of_positions(torch, p, w).to(f64).sum() for w in windows]

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
    values = {"real_tokens": real, "padding_tokens": padding, "documents": documents, "causal_pairs": pairs,
              "items": items, "patches": patches, "merged_tokens": merged, "vision_pairs_per_frame": per_frame,
              "vision_pairs_whole": whole, "vision_window_pairs": window, "vision_cls_tokens": cls_tokens,
              "image_block_pairs": block,
              "itemless_device_tokens": zero if has_items else real + padding,
              "itemless_causal_pairs": zero if has_items else pairs}
    for k, pairs_k in enumerate(window_pairs):
        values[f"window_pairs_{k}"] = pairs_k
        values[f"itemless_window_pairs_{k}"] = zero if has_items else pairs_k
    entries = [zero] * (slots.counts + 1)
    for name, value in values.items():
        entries[slots.index[name]] = value  # a KeyError here: the library's table lost a count this path forms
    entries[slots.invalid] = invalid
    return torch.stack(entries)


def _device_scalar(torch: Any, value: Any, device: Any) -> Any:
    """`value` (a tensor on `device`, or a Python number) as a 0-d float64 tensor there, without a sync:
    torch.as_tensor(3.5, device="cuda") copies from the host and waits for the copy (a sync that
    set_sync_debug_mode("error") refuses); torch.full writes the number with a fill kernel instead."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype=torch.float64).reshape(())
    return torch.full((), float(value), dtype=torch.float64, device=device)


class DeviceCounts:
    """This rank's interval accumulators on one device, and its running totals there.

    `flops_weights`: the model FLOPs per unit of each of the row's counts (_native.row_flops_weights)."""

    def __init__(self, torch: Any, device: Any, merge_size: Union[VisionGeometry, int], flops_weights: Sequence[int],
                 windows: Sequence[Window] = ()) -> None:
        self.torch = torch
        self.device = device
        self.merge_size = merge_size
        self.windows = tuple(windows)
        self.slots = Slots()
        if len(flops_weights) != self.slots.counts:
            raise ValueError(f"flops_weights: one weight per count ({self.slots.counts}), got {len(flops_weights)}")
        self.accumulated = torch.zeros(self.slots.total, dtype=torch.float64, device=device)
        self.seen = torch.zeros(3, dtype=torch.float64, device=device)  # real tokens, samples, label tokens
        self.flops_seen = torch.zeros(FLOPS_LIMBS, dtype=torch.int64, device=device)  # this rank's device FLOPs
        digits = torch.tensor(weight_digit_matrix(flops_weights), dtype=torch.int64)
        # Made on the host once; to a CUDA device from pinned memory, so that the copy does not wait.
        self.weight_digits = digits if device.type == "cpu" else digits.pin_memory().to(device, non_blocking=True)

    def add(self, fmt: Optional[str], batch: Any, grids: Any, padding_tokens: int, samples: int,
            loss_sum: Any, label_tokens: Any) -> None:
        """Adds one micro-batch, masked by its validity; no value is read back."""
        torch = self.torch
        s = self.slots
        counts = batch_counts(torch, fmt, batch, grids, padding_tokens, self.merge_size, self.device, s, self.windows)
        real = counts[s.index["real_tokens"]]
        valid = (counts[s.invalid] == 0).to(torch.float64)
        if label_tokens is not None:
            labels = _device_scalar(torch, label_tokens, self.device)
            # More label tokens than real tokens is refused on the host path; here both are on the device.
            valid = valid * (real >= labels).to(torch.float64)
            loss = _device_scalar(torch, loss_sum, self.device)
            valid = valid * torch.isfinite(loss).to(torch.float64)
            self.accumulated[s.label_tokens] += valid * labels
            self.accumulated[s.loss_sum] += torch.where(valid > 0, loss, torch.zeros_like(loss))
        self.accumulated[:s.invalid] += counts[:s.invalid] * valid
        self.accumulated[s.invalid] += 1 - valid
        self.accumulated[s.samples] += valid * float(samples)
        # The sums the Megatron constant's attention parts grow with, per micro-batch of S device tokens.
        row_tokens = real + counts[s.index["padding_tokens"]]
        self.accumulated[s.tokens_squared] += valid * (row_tokens * row_tokens)
        self.accumulated[s.tokens_times_patches] += valid * (row_tokens * counts[s.index["patches"]])

    def contribute(self, host_row_buffer: Any, rank: int, layout: _native.RowLayout) -> Any:
        """The collective buffer on the device: the host buffer plus this interval's device values in this
        rank's row. Starts the next interval."""
        if self.device.type == "cpu":
            buffer = host_row_buffer.clone()
        else:
            # A fresh pinned copy each log: torch's pinned-memory allocator keeps the block until the
            # non-blocking copy that reads it has run on the device, however far the device lags behind.
            buffer = host_row_buffer.pin_memory().to(self.device, non_blocking=True)
        row = rank * layout.row_doubles
        a = self.accumulated
        s = self.slots
        if layout.num_counts != s.counts:
            raise RuntimeError(f"the library's row has {layout.num_counts} counts, its count table {s.counts}")
        buffer[row + layout.counts: row + layout.counts + s.counts] += a[:s.counts]
        buffer[row + layout.device_rejected] += a[s.invalid]
        buffer[row + layout.label_tokens] += a[s.label_tokens]
        buffer[row + layout.loss_sum] += a[s.loss_sum]
        # In the host path's order of operations (derive.h, megatron_billing::interval_flops): the same double.
        real = a[s.index["real_tokens"]]
        tokens = real + a[s.index["padding_tokens"]]
        buffer[row + layout.megatron_flops] += (tokens * layout.megatron_text_linear
                                                + a[s.tokens_squared] * layout.megatron_text_attention_slope
                                                + a[s.index["patches"]] * layout.megatron_vision_linear
                                                + a[s.tokens_times_patches] * layout.megatron_vision_attention_slope)
        # The interval ends here: its tokens, samples and FLOPs join the running totals, which the row carries.
        self._add_interval_flops()
        self.seen[0] += real
        self.seen[1] += a[s.samples]
        self.seen[2] += a[s.label_tokens]
        self.accumulated.zero_()
        buffer[row + layout.tokens_seen] += self.seen[0]
        buffer[row + layout.samples_seen] += self.seen[1]
        buffer[row + layout.label_tokens_seen] += self.seen[2]
        limbs = slice(row + layout.flops_seen, row + layout.flops_seen + 3)
        buffer[limbs] = self._with_flops_seen(buffer[limbs])
        return buffer

    def _add_interval_flops(self) -> None:
        """The exact model FLOPs of the interval's counts join this rank's running total, on the device: the
        counts' digits times the weights' digits, folded into 32-bit limbs and carried."""
        torch = self.torch
        counts = self.accumulated[:self.slots.counts]
        # A count of 2^53 or more may be rounded already: 2^128 FLOPs, which marks the total beyond a row for good.
        self.flops_seen[FLOPS_LIMBS - 1] += (counts >= EXACT_INTEGER_LIMIT).any().to(torch.int64)
        whole = counts.clamp(max=EXACT_INTEGER_LIMIT).to(torch.int64)
        digits = torch.stack([torch.div(whole, 1 << (16 * i), rounding_mode="floor").remainder(1 << 16)
                              for i in range(COUNT_DIGITS)], dim=1)
        positions = (digits.reshape(-1, 1) * self.weight_digits).sum(0)  # S_0 .. S_7, each below 2^39
        self.flops_seen[:PRODUCT_DIGITS // 2] += positions[0::2] + positions[1::2] * (1 << 16)
        _carry(torch, self.flops_seen)

    def _with_flops_seen(self, host_limbs: Any) -> Any:
        """A row's three FLOPs limbs (the host's total: whole numbers below 2^32, or -1 in each) plus this rank's
        device total, carried; -1 in each when the sum reaches 2^96 or the host's limbs say so."""
        torch = self.torch
        host = host_limbs.to(torch.int64)
        total = torch.cat([host + self.flops_seen[:3], torch.zeros(1, dtype=torch.int64, device=host.device)])
        _carry(torch, total)
        beyond = ((total[3] + self.flops_seen[3] + self.flops_seen[4]) != 0) | (host < 0).any()
        return torch.where(beyond, torch.full((), FLOPS_SEEN_BEYOND_ROW, dtype=torch.float64, device=host.device),
                           total[:3].to(torch.float64))

    def end_interval(self) -> None:
        """A log without a collective: tokens, samples and FLOPs join the running totals, the rest is dropped,
        and device rejections wait for the next row."""
        a = self.accumulated
        s = self.slots
        self._add_interval_flops()
        self.seen[0] += a[s.index["real_tokens"]]
        self.seen[1] += a[s.samples]
        self.seen[2] += a[s.label_tokens]
        rejected = a[s.invalid].clone()
        a.zero_()
        a[s.invalid] = rejected
