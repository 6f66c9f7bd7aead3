"""FlopModel: the exact FLOP model of one model, from a shipped name, a model TOML, a config.json, a
checkpoint directory or a parsed config.json dict. No torch needed.

Ownership: a FlopModel owns a library handle, released when it is garbage-collected.
Thread-safety: a FlopModel is immutable; any thread may use it at any time.
"""

from __future__ import annotations

import ctypes
import json
import os
import weakref
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _batch, _native
from .errors import ConfigError

PathLike = Union[str, "os.PathLike[str]"]
SCOPES = {"complete": _native.SCOPE_COMPLETE, "seed": _native.SCOPE_SEED}


def model_configs_dir() -> Path:
    """The directory of the shipped model configs."""
    return _native.SHARE_DIR / "model_configs"


def shipped_models() -> List[str]:
    """The names of the shipped model configs (``qwen3_vl_2b``, ...), sorted."""
    return sorted(p.stem for p in model_configs_dir().glob("*.toml"))


def resolve_model(name_or_path: PathLike) -> str:
    """A path as given when it exists, else the shipped config of that name; ConfigError when neither."""
    text = os.fspath(name_or_path)
    if not isinstance(text, str):
        raise TypeError(f"model must be a str or os.PathLike, got {type(name_or_path).__name__}")
    if os.path.exists(text):
        return text
    shipped = model_configs_dir() / f"{text}.toml"
    if os.sep not in text and "." not in os.path.basename(text) and shipped.is_file():
        return str(shipped)
    raise ConfigError(
        f"{text}: no such model file, and not a shipped config name (shipped: {', '.join(shipped_models())})"
    )


def _scope_value(scope: str) -> int:
    if not isinstance(scope, str):
        raise TypeError(f"scope must be a str, got {type(scope).__name__}")
    try:
        return SCOPES[scope]
    except KeyError:
        raise ValueError(f"scope must be 'complete' or 'seed', got {scope!r}") from None


class FlopModel:
    """The exact training FLOPs of one model.

    ``FlopModel("qwen3_vl_2b")`` takes a shipped config name, a model TOML, a Hugging Face ``config.json``, a
    checkpoint directory holding one, or a dict that is a parsed config.json (``json.load`` or transformers'
    ``PretrainedConfig.to_dict()``). A bad file raises ``ConfigError`` with ``file:line:col``.
    """

    def __init__(self, model: Union[PathLike, Mapping[str, Any]]) -> None:
        lib = _native.lib()
        error = _native.error_buffer()
        if isinstance(model, Mapping):
            try:
                text = json.dumps(model, indent=1, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise ValueError(f"model: the dict is not a JSON config ({e})") from None
            data = text.encode("utf-8")
            handle = lib.flopmeter_model_parse_json(data, len(data), b"<dict>", error, len(error))
            self._source = "<dict>"
        elif isinstance(model, (str, os.PathLike)):
            path = resolve_model(model)
            handle = lib.flopmeter_model_load(os.fsencode(path), error, len(error))
            self._source = path
        else:
            raise TypeError(
                f"model must be a shipped name, a path or a config.json dict, got {type(model).__name__}"
            )
        if not handle:
            raise ConfigError(error.value.decode("utf-8", "replace"))
        self._adopt(handle)

    @classmethod
    def _from_handle(cls, handle: int, source: str) -> "FlopModel":
        self = cls.__new__(cls)
        self._source = source
        self._adopt(handle)
        return self

    def _adopt(self, handle: int) -> None:
        self._handle = handle
        self._finalizer = weakref.finalize(self, _native.lib().flopmeter_model_destroy, handle)
        self._coefficients = json.loads(_native.read_json(_native.lib().flopmeter_model_coefficients_json, handle))
        self._counts = _native.sized(_native.Counts)
        self._flops = _native.sized(_native.Flops)
        self._mb = _native.sized(_native.Microbatch)
        self._windows = _native.model_windows(handle)

    @property
    def name(self) -> str:
        return self._coefficients["model"]

    @property
    def coefficients(self) -> Dict[str, Any]:
        """The keys of ``flopmeter coefficients --json``: FLOPs per token, pair, patch, merged token."""
        return json.loads(json.dumps(self._coefficients))  # a copy: the model is immutable

    @property
    def windows(self) -> List[Tuple[str, int]]:
        """The decoder's attention windows besides full attention, ``("sliding", w)`` or ``("chunked", c)``;
        ``counts()``'s ``window_pairs_<k>`` counts the pairs under window k. Empty for a model that attends fully
        on every layer."""
        return list(self._windows)

    def counts(self, *, document_lengths: Any = None, cu_seqlens: Any = None, position_ids: Any = None,
               image_grid_thw: Any = None, padding_tokens: int = 0) -> Dict[str, int]:
        """The exact counts of one micro-batch (``flopmeter estimate --json``'s ``counts``), named as the library
        names them: tokens, documents, causal pairs, image counts, and the pairs under each attention window
        (``window_pairs_0``, ``window_pairs_1``; 0 for a window the model does not have)."""
        counts = self._count(document_lengths, cu_seqlens, position_ids, image_grid_thw, padding_tokens)
        return {name: int(getattr(counts, name)) for name in _native.COUNT_FIELDS}

    def flops(self, *, document_lengths: Any = None, cu_seqlens: Any = None, position_ids: Any = None,
              image_grid_thw: Any = None, padding_tokens: int = 0, scope: str = "complete") -> int:
        """The exact training FLOPs (forward + backward) of one micro-batch, as a Python int."""
        scope_value = _scope_value(scope)
        counts = self._count(document_lengths, cu_seqlens, position_ids, image_grid_thw, padding_tokens)
        flops = _native.sized(_native.Flops)
        code = _native.lib().flopmeter_model_flops(self._handle, ctypes.byref(counts), scope_value, ctypes.byref(flops))
        if code != _native.OK:
            raise ValueError(f"flops: {_native.status_string(code)}")
        return int(flops.exact_total.decode("ascii"))

    def estimate(self, *, document_lengths: Any = None, cu_seqlens: Any = None, position_ids: Any = None,
                 image_grid_thw: Any = None, padding_tokens: int = 0, scope: str = "complete",
                 seq_len: Optional[int] = None) -> Dict[str, Any]:
        """The keys of ``flopmeter estimate --json``: FLOPs per term, the counts, and the Megatron constant's
        view of the same batch at row length ``seq_len`` (default: the batch's tokens)."""
        scope_value = _scope_value(scope)
        row_length = 0 if seq_len is None else _batch.count_argument("seq_len", seq_len, minimum=1)
        counts = self._count(document_lengths, cu_seqlens, position_ids, image_grid_thw, padding_tokens)
        report = json.loads(_native.read_json(_native.lib().flopmeter_model_estimate_json, self._handle,
                                              ctypes.byref(counts), scope_value, row_length))
        return report

    def _count(self, document_lengths: Any, cu_seqlens: Any, position_ids: Any, image_grid_thw: Any,
               padding_tokens: Any) -> _native.Counts:
        fmt, value = _batch.one_batch_format(document_lengths, cu_seqlens, position_ids)
        batch = None
        if fmt is not None:
            batch = _batch.host_array(fmt, value, allow_int32=(fmt == "position_ids"))
        grids = None if image_grid_thw is None else _batch.host_array("image_grid_thw", image_grid_thw, want_rows=True)
        padding = _batch.count_argument("padding_tokens", padding_tokens)
        mb = _native.sized(_native.Microbatch)
        _batch.fill_microbatch(mb, fmt, batch, grids, padding)
        counts = _native.sized(_native.Counts)
        error = _native.error_buffer()
        code = _native.lib().flopmeter_model_count(self._handle, ctypes.byref(mb), ctypes.byref(counts), error,
                                                   len(error))
        if code != _native.OK:
            raise ValueError(f"invalid micro-batch: {error.value.decode('utf-8', 'replace')}")
        return counts

    def __repr__(self) -> str:
        return f"FlopModel({self.name!r}, source={self._source!r})"
