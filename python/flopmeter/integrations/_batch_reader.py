"""Reads a Hugging Face style batch dict into ``Meter.on_microbatch``'s keyword arguments.

The batch is what a data collator returns (or what a model's ``forward`` is called with): ``input_ids``
``[rows, length]`` (or ``inputs_embeds``), and any of ``cu_seq_lens_q``, ``packed_seq_lengths``,
``position_ids`` (``[rows, length]``, or Qwen-VL's M-RoPE ``[3 or 4, rows, length]``), ``text_position_ids``,
``attention_mask``, ``labels``, ``shift_labels``, ``image_grid_thw``, ``video_grid_thw``.

Every slot of ``rows x length`` runs through the model. A slot is a real token of a document or padding. The
documents come from the first of these the batch has:

1. ``cu_seq_lens_q``: the boundaries of the flattened row (a padding-free batch);
2. ``packed_seq_lengths`` (Unsloth's padding-free and packed batches): the documents' lengths in order, filling
   the rows one after the other (a row's real tokens are its non-zero ``attention_mask`` entries, all its slots
   without one); a document never crosses a row;
3. ``text_position_ids``, else ``position_ids`` (the first row of an M-RoPE stack): a document starts where the
   position is 0;
4. ``attention_mask`` rows: each row is one document of its non-zero entries, unless the mask holds document
   ids (Axolotl's multipack: 1, 1, 2, 2, 2, 3, 0, 0), where a document starts wherever the id changes;
5. whole rows.

A new row always starts a new document. Slots where ``attention_mask`` is 0 are padding. So is the tail that a
collator's ``pad_to_multiple_of`` appends to a flattened row: it shows as one-token documents (a boundary of its
own in ``cu_seq_lens_q``, position 0 in ``position_ids``) of the pad token with label -100, and is taken off the
end of the row as padding instead of being billed as one-token documents.

``label_tokens`` are the tokens a causal LM's loss averages over: ``shift_labels != -100`` when the batch has
``shift_labels``, else ``labels[..., 1:] != -100`` (the model predicts token i + 1 from token i, so the first
label of a row is never a target). ``image_grid_thw`` and ``video_grid_thw`` together are the items of the
vision tower.

Thread-safety: pure functions of their arguments. They run on the host (in the data collator, before the batch
reaches a device), so reading the batch costs no device synchronisation.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

IGNORE_INDEX = -100
POSITION_KEYS = ("text_position_ids", "position_ids")
_DOCUMENT_KEYS = ("cu_seq_lens_q", "packed_seq_lengths") + POSITION_KEYS


def _host(value: Any) -> Any:
    """`value` as a CPU torch tensor (a list or a NumPy array converted; a tensor on a device copied)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else value.cpu()
    return torch.as_tensor(value)


def _shape(batch: Mapping[str, Any]):
    """(rows, length) of the batch: from input_ids, inputs_embeds, labels or attention_mask."""
    for key in ("input_ids", "labels", "attention_mask"):
        value = batch.get(key)
        if value is not None and getattr(value, "dim", None) is not None and value.dim() == 2:
            return int(value.shape[0]), int(value.shape[1])
    embeds = batch.get("inputs_embeds")
    if embeds is not None and embeds.dim() == 3:
        return int(embeds.shape[0]), int(embeds.shape[1])
    ids = batch.get("input_ids")
    if ids is not None and ids.dim() == 1:
        return 1, int(ids.shape[0])
    return None


def _position_row(batch: Mapping[str, Any], rows: int, length: int):
    """The positions that restart at 0 per document, flattened to rows * length, or None."""
    for key in POSITION_KEYS:
        value = batch.get(key)
        if value is None:
            continue
        pos = _host(value)
        if pos.dim() == 3:  # M-RoPE: [3 or 4, rows, length]; the first row (the text positions in a 4-row stack)
            pos = pos[0]
        if pos.dim() == 1:
            pos = pos.unsqueeze(0)
        if tuple(pos.shape) != (rows, length):
            raise ValueError(f"batch[{key!r}] has shape {tuple(value.shape)}, the batch's tokens are "
                             f"[{rows}, {length}]")
        return pos.reshape(-1)
    return None


def _packed_starts(lengths: Any, real: Any, starts: Any, rows: int, length: int) -> None:
    """Marks in `starts` where the documents of ``packed_seq_lengths`` begin: they fill each row's real slots in
    order (a row's real slots come first: a row is padded at its end), and slots past the documents are padding."""
    lengths = [int(n) for n in lengths.reshape(-1).tolist()]
    if any(n < 0 for n in lengths):
        raise ValueError(f"batch['packed_seq_lengths'] must be >= 0, got {lengths[:8]}")
    row_real = real.reshape(rows, length).sum(dim=1).tolist() if rows else []
    row, used = 0, 0
    for n in lengths:
        if n == 0:
            continue
        while row < rows and used + n > row_real[row]:
            real[row * length + used: (row + 1) * length] = False  # the rest of the row holds no document
            row, used = row + 1, 0
        if row == rows:
            raise ValueError(f"batch['packed_seq_lengths'] hold {sum(lengths)} tokens in documents that do not "
                             f"fit the batch's rows of {row_real} real tokens")
        starts[row * length + used] = True
        used += n
    for r in range(row, rows):
        real[r * length + (used if r == row else 0): (r + 1) * length] = False


def pad_token_id(*owners: Any) -> Optional[int]:
    """The first integer ``pad_token_id`` of `owners` (tokenizers, processors, configs; None entries skipped), the
    text config of a config included."""
    for owner in owners:
        for candidate in (owner, getattr(owner, "tokenizer", None), getattr(owner, "text_config", None)):
            value = getattr(candidate, "pad_token_id", None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _row_lengths(batch: Mapping[str, Any], rows: int, length: int) -> Optional[Any]:
    """The documents of a padded batch: its rows, each one document of its real tokens (``attention_mask`` of 0
    and 1 only), with neither boundaries nor positions nor packed lengths; None for any other batch. The general
    reader gives the same lengths; this reads them with two reductions instead of a pass per slot."""
    mask = batch.get("attention_mask")
    if mask is None or any(batch.get(key) is not None for key in _DOCUMENT_KEYS):
        return None
    mask = _host(mask)
    if mask.dim() != 2 or tuple(mask.shape) != (rows, length) or not rows or not length or int(mask.max()) > 1:
        return None
    lengths = mask.ne(0).sum(dim=1)
    return lengths[lengths > 0]


def _document_lengths(torch: Any, batch: Mapping[str, Any], rows: int, length: int,
                      pad_token_id: Optional[int]) -> Any:
    """The lengths of the batch's documents in order (the module docstring's rules); slots not in one are padding."""
    slots = rows * length
    starts = torch.zeros(slots, dtype=torch.bool)
    if slots:
        starts[::length] = True
    real = torch.ones(slots, dtype=torch.bool)
    cu = batch.get("cu_seq_lens_q")
    positions = None
    if cu is not None:
        cu = _host(cu).reshape(-1).to(torch.int64)
        if cu.numel() < 1 or int(cu[0]) != 0 or bool((cu[1:] < cu[:-1]).any()) or int(cu[-1]) > slots:
            raise ValueError(f"batch['cu_seq_lens_q'] must rise from 0 to at most the batch's {slots} tokens, "
                             f"got {cu.tolist()[:8]}{'...' if cu.numel() > 8 else ''}")
        inner = cu[:-1][cu[:-1] < slots]
        starts[inner] = True
        real[int(cu[-1]):] = False  # slots past the last boundary belong to no document
    mask = batch.get("attention_mask")
    mask_flat = None
    if mask is not None and _host(mask).dim() == 2 and tuple(mask.shape) == (rows, length):
        mask_flat = _host(mask).reshape(-1)
        real &= mask_flat != 0
    packed = batch.get("packed_seq_lengths") if cu is None else None
    if packed is not None:
        _packed_starts(_host(packed), real, starts, rows, length)
    elif cu is None:
        positions = _position_row(batch, rows, length)
        if positions is not None:
            starts |= positions == 0
        elif mask_flat is not None and slots and bool((mask_flat > 1).any()):
            # Document ids (Axolotl's multipack): a document starts where the id changes within a row.
            starts[1:] |= mask_flat[1:] != mask_flat[:-1]
    labels = batch.get("labels")
    labels_flat = None
    if labels is not None and _host(labels).dim() in (1, 2) and _host(labels).numel() == slots:
        labels_flat = _host(labels).reshape(-1)
    if pad_token_id is not None and (cu is not None or positions is not None):
        ids = batch.get("input_ids")
        if ids is not None and _host(ids).numel() == slots:
            ids_flat = _host(ids).reshape(-1)
            # The pad_to_multiple_of tail: one-token documents of the pad token without a label, at the row's end.
            i = slots - 1
            while i >= 0 and real[i] and starts[i] and (i + 1 == slots or starts[i + 1] or not real[i + 1]) and \
                    int(ids_flat[i]) == pad_token_id and (labels_flat is None or int(labels_flat[i]) == IGNORE_INDEX):
                real[i] = False
                i -= 1
    document = torch.cumsum(starts.to(torch.int64), 0) - 1
    lengths = torch.bincount(document[real], minlength=int(document[-1]) + 1 if slots else 0)
    return lengths[lengths > 0]


def describe_batch(batch: Mapping[str, Any], *, pad_token_id: Optional[int] = None,
                   count_labels: bool = True) -> Optional[Dict[str, Any]]:
    """``Meter.on_microbatch``'s keyword arguments for one micro-batch (``cu_seqlens``, ``padding_tokens``,
    ``samples``, ``grid_thw``, and ``label_tokens`` when it has labels and `count_labels`), or None when the batch
    holds no token tensors this reader knows. Raises ValueError for a batch whose keys disagree on its shape."""
    import torch

    if not isinstance(batch, Mapping):
        return None
    shape = _shape(batch)
    if shape is None:
        return None
    rows, length = shape
    slots = rows * length
    lengths = _row_lengths(batch, rows, length)
    if lengths is None:
        lengths = _document_lengths(torch, batch, rows, length, pad_token_id)
    cu_seqlens = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    torch.cumsum(lengths, 0, out=cu_seqlens[1:])
    real_tokens = int(cu_seqlens[-1])
    described: Dict[str, Any] = {"cu_seqlens": cu_seqlens, "padding_tokens": slots - real_tokens,
                                 "samples": int(lengths.numel())}
    grids = [_host(batch[key]).reshape(-1, 3).to(torch.int64) for key in ("image_grid_thw", "video_grid_thw")
             if batch.get(key) is not None and _host(batch[key]).numel() > 0]
    if grids:
        described["grid_thw"] = torch.cat(grids).contiguous()
    shift, labels = batch.get("shift_labels"), batch.get("labels")
    if not count_labels:
        pass
    elif shift is not None:
        described["label_tokens"] = int((_host(shift) != IGNORE_INDEX).sum())
    elif labels is not None and _host(labels).dim() in (1, 2) and _host(labels).numel() == slots:
        targets = _host(labels).reshape(rows, length)[:, 1:]
        described["label_tokens"] = int((targets != IGNORE_INDEX).sum())
    if "label_tokens" in described:
        described["label_tokens"] = min(described["label_tokens"], real_tokens)
    return described
