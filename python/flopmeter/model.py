"""FlopModel: the exact FLOP model of one model, from a shipped name, a model TOML, a config.json, a
checkpoint directory or a parsed config.json dict. No torch needed.

Ownership: a FlopModel owns a library handle, released when it is garbage-collected.
Thread-safety: a FlopModel is immutable; any thread may use it at any time.
"""

from __future__ import annotations

import copy
import ctypes
import json
import os
import weakref
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _batch, _native, _values
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


FROZEN_PARTS = ("vision", "merger", "text")
RECOMPUTE_KEYS = ("policy", "layers", "every", "vision")


def recompute_settings(recompute: Union[str, Mapping[str, Any]]) -> Dict[str, Any]:
    """``recompute=`` of ``FlopModel`` and ``Meter``: a policy name (``"full"``, ``"full_early_stop"``,
    ``"selective"``, ``"op"`` or ``"none"``), or a dict with ``policy`` and any of ``layers``, ``every``,
    ``vision`` (the plugin's ``[training] recompute*`` keys, plugin_configs/SCHEMA.md)."""
    if isinstance(recompute, str):
        return {"policy": recompute}
    if not isinstance(recompute, Mapping):
        raise TypeError(f"recompute must be a policy name or a dict, got {type(recompute).__name__}")
    unknown = sorted(set(recompute) - set(RECOMPUTE_KEYS))
    if unknown:
        raise ValueError(f"recompute: unknown key {unknown[0]!r} (expected policy, layers, every, vision)")
    if "policy" not in recompute:
        raise ValueError("recompute: the dict needs 'policy' (\"full\", \"full_early_stop\", \"selective\" or \"op\")")
    return dict(recompute)


def _set_recompute(options: Any, recompute: Union[str, Mapping[str, Any]]) -> None:
    """Fills flopmeter_model_options' recompute fields from ``recompute=`` (the library checks them against the
    model: a policy name it knows, layers and every not both set, layers within the decoder)."""
    settings = recompute_settings(recompute)
    policy = settings["policy"]
    if not isinstance(policy, str):
        raise TypeError(f"recompute['policy'] must be a str, got {type(policy).__name__}")
    vision = settings.get("vision", False)
    if not isinstance(vision, bool):
        raise TypeError(f"recompute['vision'] must be a bool, got {type(vision).__name__}")
    options.recompute_policy = policy.encode("utf-8")
    options.recompute_layers = _batch.count_argument("recompute['layers']", settings.get("layers", 0))
    options.recompute_every = _batch.count_argument("recompute['every']", settings.get("every", 0))
    options.recompute_vision = int(vision)


def _with_regime(handle: int, frozen: Any, lora_rank: Any, lora_targets: Any, recompute: Any = None) -> int:
    """A new model handle: `handle`'s model in the regime (`handle` is released either way)."""
    lib = _native.lib()
    try:
        parts = [frozen] if isinstance(frozen, str) else list(frozen or [])
        for i, part in enumerate(parts):
            if part not in FROZEN_PARTS:
                raise ValueError(f"frozen[{i}] must be one of {', '.join(map(repr, FROZEN_PARTS))}, got {part!r}")
        if len(set(parts)) != len(parts):
            raise ValueError(f"frozen names a part twice: {parts}")
        rank = _batch.count_argument("lora_rank", lora_rank)
        if isinstance(lora_targets, str):
            raise TypeError("lora_targets must be a list of projection names, not a str")
        targets = list(lora_targets or [])
        for i, target in enumerate(targets):
            if not isinstance(target, str):
                raise TypeError(f"lora_targets[{i}] must be a str, got {type(target).__name__}")
        options = _native.sized(_native.ModelOptions)
        options.vision_frozen = int("vision" in parts)
        options.merger_frozen = int("merger" in parts)
        options.text_frozen = int("text" in parts)
        options.lora_rank = rank
        names = (ctypes.c_char_p * max(1, len(targets)))(*[t.encode("utf-8") for t in targets])
        options.lora_targets = ctypes.cast(names, ctypes.POINTER(ctypes.c_char_p))
        options.num_lora_targets = len(targets)
        if recompute is not None:
            _set_recompute(options, recompute)
        error = _native.error_buffer()
        regime = lib.flopmeter_model_with_options(handle, ctypes.byref(options), error, len(error))
        if not regime:
            message = (error.value.decode("utf-8", "replace").replace("flopmeter_model_options.", "")
                       .replace("training.recompute", "recompute"))
            raise ValueError(f"training regime: {message}")
        return regime
    finally:
        lib.flopmeter_model_destroy(handle)


class FlopModel:
    """The exact training FLOPs of one model.

    ``FlopModel("qwen3_vl_2b")`` takes a shipped config name, a model TOML, a Hugging Face ``config.json``, a
    checkpoint directory holding one, or a dict that is a parsed config.json (``json.load`` or transformers'
    ``PretrainedConfig.to_dict()``). A bad file raises ``ConfigError`` with ``file:line:col``.

    What trains, as the plugin's ``[training]`` table says it (plugin_configs/SCHEMA.md): ``frozen`` is any of
    ``"vision"``, ``"merger"``, ``"text"`` (a str or a list), ``lora_rank`` and ``lora_targets`` the LoRA adapters
    (``FlopModel("qwen3_vl_2b", frozen="vision", lora_rank=16, lora_targets=["q_proj", "v_proj"])``). A regime
    that does not fit the model raises ``ValueError`` naming the argument. ``recompute`` is the activation
    recomputation the run does (``recompute_settings``): it changes no model FLOP, and ``estimate()`` then carries
    ``hardware_flops`` (model FLOPs plus the forward run again) and the per-term ``recompute`` breakdown, as
    ``flopmeter estimate --recompute`` does (``FlopModel("qwen3_8b", recompute="full_early_stop")``).
    """

    def __init__(self, model: Union[PathLike, Mapping[str, Any]], *, frozen: Union[str, Sequence[str], None] = None,
                 lora_rank: int = 0, lora_targets: Optional[Sequence[str]] = None,
                 recompute: Union[str, Mapping[str, Any], None] = None) -> None:
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
        if frozen is not None or lora_rank or lora_targets or recompute is not None:
            handle = _with_regime(handle, frozen, lora_rank, lora_targets, recompute)
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
        lib = _native.lib()
        self._coefficients = _values.ReportReader(handle, _values.REPORT_COEFFICIENTS).read(
            lib.flopmeter_model_coefficients, handle)
        self._estimate_report = _values.ReportReader(handle, _values.REPORT_ESTIMATE)
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
        return copy.deepcopy(self._coefficients)  # a copy: the model is immutable

    @property
    def windows(self) -> List[Tuple[str, int]]:
        """The decoder's attention windows besides full attention, ``("sliding", w)`` or ``("chunked", c)``;
        ``counts()``'s ``window_pairs_<k>`` counts the pairs under window k. Empty for a model that attends fully
        on every layer."""
        return list(self._windows)

    def counts(self, *, document_lengths: Any = None, cu_seqlens: Any = None, position_ids: Any = None,
               grid_thw: Any = None, padding_tokens: int = 0, image_grid_thw: Any = None) -> Dict[str, int]:
        """The exact counts of one micro-batch (``flopmeter estimate --json``'s ``counts``), named as the library
        names them: tokens, documents, causal pairs, image counts, and the pairs under each attention window
        (``window_pairs_0``, ``window_pairs_1``; 0 for a window the model does not have).

        Here and in ``flops`` and ``estimate``, ``grid_thw`` is the items (images and videos) as [items, 3] rows
        t, h, w in patches; ``image_grid_thw=``, its name before 0.3, still works, with a FutureWarning."""
        counts = self._count(document_lengths, cu_seqlens, position_ids, grid_thw, padding_tokens, image_grid_thw)
        return {name: int(getattr(counts, name)) for name in _native.COUNT_FIELDS}

    def flops(self, *, document_lengths: Any = None, cu_seqlens: Any = None, position_ids: Any = None,
              grid_thw: Any = None, padding_tokens: int = 0, scope: str = "complete",
              image_grid_thw: Any = None) -> int:
        """The exact training FLOPs (forward + backward) of one micro-batch, as a Python int."""
        scope_value = _scope_value(scope)
        counts = self._count(document_lengths, cu_seqlens, position_ids, grid_thw, padding_tokens, image_grid_thw)
        flops = _native.sized(_native.Flops)
        code = _native.lib().flopmeter_model_flops(self._handle, ctypes.byref(counts), scope_value, ctypes.byref(flops))
        if code != _native.OK:
            raise ValueError(f"flops: {_native.status_string(code)}")
        return int(flops.exact_total.decode("ascii"))

    def estimate(self, *, document_lengths: Any = None, cu_seqlens: Any = None, position_ids: Any = None,
                 grid_thw: Any = None, padding_tokens: int = 0, scope: str = "complete",
                 seq_len: Optional[int] = None, image_grid_thw: Any = None) -> Dict[str, Any]:
        """The keys of ``flopmeter estimate --json``: FLOPs per term, the counts, and the Megatron constant's
        view of the same batch at row length ``seq_len`` (default: the batch's tokens)."""
        scope_value = _scope_value(scope)
        row_length = 0 if seq_len is None else _batch.count_argument("seq_len", seq_len, minimum=1)
        counts = self._count(document_lengths, cu_seqlens, position_ids, grid_thw, padding_tokens, image_grid_thw)
        return self._estimate_report.read(_native.lib().flopmeter_model_estimate, self._handle, ctypes.byref(counts),
                                          scope_value, row_length)

    def _count(self, document_lengths: Any, cu_seqlens: Any, position_ids: Any, grid_thw: Any,
               padding_tokens: Any, image_grid_thw: Any = None) -> _native.Counts:
        if image_grid_thw is not None:
            grid_thw = _batch.renamed_grid_thw(grid_thw, image_grid_thw, stacklevel=4)
        fmt, value = _batch.one_batch_format(document_lengths, cu_seqlens, position_ids)
        batch = None
        if fmt is not None:
            batch = _batch.host_array(fmt, value, allow_int32=(fmt == "position_ids"))
        grids = None if grid_thw is None else _batch.host_array("grid_thw", grid_thw, want_rows=True)
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
