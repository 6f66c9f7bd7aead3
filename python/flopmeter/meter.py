"""Meter: the throughput plugin in a Python training loop.

``on_microbatch`` for every micro-batch, ``on_log`` at each log step, ``flush`` (or leaving the ``with``
block) at the end. Counts are exact from the batch's documents and images; a fixed number of fixed-size
collectives per log over a group of flopmeter's own, read one log later; ``on_log`` returns the record of the interval that ended one
log earlier (a dict with the JSONL sink's keys, what ``wandb.log`` takes), or None while none is due.

Ownership: a Meter owns its plugin in the library, released by ``close()``, by leaving the ``with`` block, or
when the Meter is garbage-collected (which flushes first, bounded by ``[logging] collective_timeout_ms``, as
the C ABI's destroy does).
Thread-safety: every method may be called from any thread; calls are serialised by the Meter (on_microbatch's
C fast path for CPU tensors by the library itself, which serialises calls on one plugin).
"""

from __future__ import annotations

import ctypes
import datetime
import os
import sys
import threading
import weakref
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from . import _batch, _config, _device_path, _distributed, _native, _values
from .errors import ConfigError
from .model import FlopModel, recompute_settings

PathLike = Union[str, "os.PathLike[str]"]
_INT64_MAX = 2**63 - 1


def _rejected(reason: str) -> str:
    """The ValueError's text for a micro-batch the library refused, with the library's reason."""
    return f"invalid micro-batch, not counted (health['bad_microbatches']): {reason}"


def _release_plugin(handle: int, keep_alive: Any) -> None:
    """The finalizer: flush (bounded by the collective timeout) and free the plugin."""
    _native.lib().flopmeter_destroy(handle)
    collective = keep_alive[0]
    collective.close()  # ends its log-depth thread, if any, once its jobs are through
    del keep_alive  # the callbacks the library may call until destroy returned


def _resolve_auto_gpu(tables: Dict[str, Any]) -> None:
    """[peak] gpu = "auto": the name of the trainer's current CUDA device, through torch when the trainer has
    imported it (the library would otherwise ask the CUDA driver itself, and warn when there is no device)."""
    peak = tables.get("peak")
    if not isinstance(peak, dict) or not isinstance(peak.get("gpu"), str) or peak["gpu"].strip().lower() != "auto":
        return
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            peak["gpu"] = torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - no usable device: leave "auto" to the library, which says so
        pass


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    seconds = _batch.float_argument(name, value)
    if seconds < 0:
        raise ValueError(f"{name} must be >= 0 seconds, got {seconds}")
    return seconds


def _recompute_keys(recompute: Union[str, Mapping[str, Any]]) -> Dict[str, Any]:
    """The ``[training]`` keys of ``Meter(recompute=...)`` (``recompute_settings`` says what it takes). The values
    themselves are checked by the plugin's config rules."""
    names = {"policy": "recompute", "layers": "recompute_layers", "every": "recompute_every",
             "vision": "recompute_vision"}
    return {names[key]: value for key, value in recompute_settings(recompute).items()}


def _configured_small_allreduce(config: Any, tables: Mapping[str, Any]) -> str:
    """``[logging] small_allreduce`` of the Meter's configuration (its tables laid over a dict config's, or its
    plugin TOML file), by the library's rule (``flopmeter_config_small_allreduce``), or "automatic". A value that
    names no algorithm is left to the library, which reports it at its key when the plugin is created; the group
    is made with "automatic" until then."""
    try:
        if config is not None and not isinstance(config, Mapping):
            made = _config.Config(path=os.fspath(config))
        else:
            made = _config.Config(_config.merge_tables(config or {}, dict(tables)))
    except (ConfigError, TypeError, OSError):
        return "automatic"  # the Meter reports the configuration's problem
    with made:
        return made.small_allreduce()


class Meter:
    """The throughput plugin.

    ``Meter("flopmeter.toml")`` reads a plugin TOML (plugin_configs/SCHEMA.md). ``Meter(model="qwen3_vl_2b",
    peak={"gpu": "H100 SXM"}, parallel={"tp": 2})`` or ``Meter({"model": {...}, "peak": {...}})`` gives the
    same tables in code, checked by the same rules (``ConfigError`` names the key: ``parallel.tp``).
    ``scope=`` and ``frozen=`` set ``[model] scope`` and ``[training] frozen``; ``recompute=`` sets
    ``[training] recompute``: a policy name (``"full"``, ``"full_early_stop"``, ``"selective"``, ``"op"``) or a
    dict with ``policy`` and any of ``layers``, ``every``, ``vision`` (``recompute_layers``, ...), which adds
    ``perf/tflops_per_second_hardware`` and ``perf/hfu`` for the recomputed forward (METRICS.md).

    When torch.distributed is initialised the Meter makes a Gloo group of its own over the whole world
    (``new_group``: every rank must make its Meter at the same point), or uses ``process_group``, which must
    span the job. Otherwise it is a single process.

    ``small_allreduce`` says how the logs' collectives travel: an ordinary log's SUM and MAX (a fixed 71
    doubles) and the per-rank table's gather. ``"automatic"`` (default) runs them by the log-depth algorithms
    over the Meter's own Gloo group from 4 ranks on: torch.distributed send/recv on a daemon thread, the SUM
    and MAX by recursive halving and doubling (about 2 log2(world) rounds, about 1.2 KB sent per rank
    whatever the job's size), the table by recursive doubling (log2(world) rounds); below 4 ranks and on a
    ``process_group`` handed in, by the group's own collectives (Gloo: rings, 2 (world - 1) rounds).
    ``"backend"`` always uses the group's own; ``"log_depth"`` always the log-depth ones (a Gloo group).
    Not given: the configuration's ``[logging] small_allreduce`` (``logging={"small_allreduce": ...}`` or the
    plugin TOML's), else ``"automatic"``. METRICS.md, "The per-log collectives at scale", has the numbers.
    """

    def __init__(self, config: Union[PathLike, Mapping[str, Any], None] = None, *,
                 model: Union[PathLike, Mapping[str, Any], None] = None, scope: Optional[str] = None,
                 frozen: Optional[Any] = None, peak: Optional[Mapping[str, Any]] = None,
                 parallel: Optional[Mapping[str, Any]] = None, logging: Optional[Mapping[str, Any]] = None,
                 sinks: Optional[Mapping[str, Any]] = None, training: Optional[Mapping[str, Any]] = None,
                 recompute: Union[str, Mapping[str, Any], None] = None, process_group: Any = None,
                 small_allreduce: Optional[str] = None) -> None:
        self._handle = 0
        self._lock = threading.RLock()
        self._closed = False
        self._device: Optional[_device_path.DeviceMicrobatches] = None  # at the first device micro-batch
        tables: Dict[str, Any] = {"model": model, "peak": peak, "parallel": parallel, "logging": logging,
                                  "sinks": sinks, "training": training}
        if scope is not None:
            tables["model"] = dict(_config.model_table(tables["model"]), scope=scope)
        if frozen is not None:
            parts = [frozen] if isinstance(frozen, str) else list(frozen)
            tables["training"] = dict(tables["training"] or {}, frozen=parts)
        if recompute is not None:
            tables["training"] = dict(tables["training"] or {}, **_recompute_keys(recompute))
        given_tables = {k: v for k, v in tables.items() if v is not None}

        lib = _native.lib()
        # Refused before any collective call; None: the configuration's [logging] small_allreduce.
        algorithm = _distributed.small_allreduce_choice(
            small_allreduce if small_allreduce is not None else _configured_small_allreduce(config, given_tables))
        group = _distributed.world_group(process_group)
        if group is None:
            self._collective = _distributed.TorchCollective(None, 0, 1)
        else:
            self._collective = _distributed.TorchCollective(*group)
            self._collective.use_log_depth(algorithm, own_group=process_group is None)
        self._box = _values.RecordReader()
        if config is not None and not isinstance(config, Mapping):
            if given_tables:
                raise TypeError("give a plugin TOML path or configuration tables, not both "
                                f"(got a path and {', '.join(given_tables)})")
            if not isinstance(config, (str, os.PathLike)):
                raise TypeError(f"config must be a path or a dict of tables, got {type(config).__name__}")
            self._source = os.fspath(config)
            built = _config.Config(path=self._source)
        else:
            merged = _config.merge_tables(config or {}, given_tables)
            _resolve_auto_gpu(merged)
            if "model" not in merged or merged["model"] is None:
                raise TypeError("Meter needs a model: Meter(model='qwen3_vl_2b', ...) or a plugin TOML path")
            self._source = "Meter(...)"
            built = _config.Config(merged)
        error = _native.error_buffer()
        with built:
            handle = lib.flopmeter_create_from_config(built.handle, ctypes.byref(self._collective.comm), error,
                                                      len(error))
        if not handle:
            raise ConfigError(error.value.decode("utf-8", "replace"))
        self._handle = handle
        lib.flopmeter_set_record_callback(handle, self._box.callback, None)
        self._finalizer = weakref.finalize(self, _release_plugin, handle, (self._collective, self._box))
        model_error = _native.error_buffer()
        model_handle = lib.flopmeter_plugin_model(handle, model_error, len(model_error))
        if not model_handle:
            raise ConfigError(model_error.value.decode("utf-8", "replace"))
        self._model = FlopModel._from_handle(model_handle, self._source)
        self._mb = _native.sized(_native.Microbatch)
        self._mb_ref = ctypes.byref(self._mb)
        self._why = ctypes.create_string_buffer(_native.WHY_BUFFER_BYTES)  # a refusal's reason, under the lock
        self._binding: Any = None  # the C fast path's (flopmeter/_fastpath.c), made at the first call
        self._last_health: Optional[Dict[str, int]] = None

    # ---- properties ----

    @property
    def model(self) -> FlopModel:
        """The FLOP model this meter counts with."""
        return self._model

    @property
    def rank(self) -> int:
        return self._collective.rank

    @property
    def world_size(self) -> int:
        return self._collective.world_size

    @property
    def health(self) -> Dict[str, int]:
        """The health counters (all 0 in a healthy run): ``bad_microbatches``, ``failed_collectives``, ...,
        ``lost_device_microbatches`` (device micro-batches whose copy to the host never arrived)."""
        with self._lock:
            if self._closed:
                return dict(self._last_health or {})
            return self._read_health()

    def _read_health(self) -> Dict[str, int]:
        counters = _native.sized(_native.HealthCounters)
        code = _native.lib().flopmeter_health(self._handle, ctypes.byref(counters))
        if code != _native.OK:
            return dict(self._last_health or {})
        self._last_health = {name: int(getattr(counters, name)) for name in _native.HEALTH_FIELDS}
        self._last_health["lost_device_microbatches"] = 0 if self._device is None else self._device.lost
        return dict(self._last_health)

    # ---- hooks ----

    def on_microbatch(self, *, document_lengths: Any = None, cu_seqlens: Any = None, position_ids: Any = None,
                      grid_thw: Any = None, padding_tokens: int = 0, samples: int = 0, loss_sum: Any = None,
                      label_tokens: Any = None, image_grid_thw: Any = None) -> bool:
        """One micro-batch this rank ran: one of document_lengths, cu_seqlens or position_ids (a torch tensor
        on the host or a device, a NumPy array, or a sequence of ints; with tensor or context parallelism the
        whole micro-batch, not this rank's shard), its images and videos as grid_thw [items, 3] (t, h, w in
        patches: a Hugging Face batch's image_grid_thw, with its video_grid_thw rows after them), and optionally
        the SUM of its per-token losses over its label_tokens. ``image_grid_thw=``, grid_thw's name before 0.3,
        still works, with a FutureWarning.

        Returns True when counted (on a device: queued, counted on the host when its copy arrives, a refusal
        then logged with its reason), False after flush or close. Raises TypeError or ValueError, naming the
        argument, for an argument that is not what it must be.
        """
        if self._device is not None and self._device.pending:
            with self._lock:
                self._device.poll()
        if image_grid_thw is not None:
            grid_thw = _batch.renamed_grid_thw(grid_thw, image_grid_thw)
        # The C fast path (flopmeter/_fastpath.c, where its rules for which arguments it takes are written), for
        # what a trainer on the host passes: cu_seqlens or position_ids and the grids as plain CPU tensors that
        # need no conversion (1-D, contiguous, int64; int32 positions too; grids [items, 3] int64, contiguous),
        # ints, and a float loss over int label tokens. Anything else, and every error, takes the one general
        # path below, which checks and converts every form and names what is wrong.
        if _batch.NATIVE_FAST_PATH and _batch.FAST_PATH and document_lengths is None:
            binding = self._binding or self._bind_native_fast_path()
            if binding is not None:
                code = _batch._fastpath.on_microbatch(binding, cu_seqlens, position_ids, grid_thw,
                                                      padding_tokens, samples, loss_sum, label_tokens)
                if code == _native.OK:
                    return True
                if code is not None:  # None: not a form the C fast path takes; the paths below check it
                    if type(code) is str:  # refused, counted once in bad_microbatches: the library's reason
                        raise ValueError(_rejected(code))
                    return False
        fmt, value = _batch.one_batch_format(document_lengths, cu_seqlens, position_ids)
        if _batch.is_device_tensor(value) or _batch.is_device_tensor(grid_thw) or \
                _batch.is_device_tensor(loss_sum) or _batch.is_device_tensor(label_tokens):
            return self._device_microbatch(fmt, value, grid_thw, padding_tokens, samples, loss_sum,
                                           label_tokens)
        batch = None if fmt is None else _batch.host_array(fmt, value, allow_int32=fmt == "position_ids")
        grids = None if grid_thw is None else _batch.host_array("grid_thw", grid_thw,
                                                                      want_rows=True)
        padding = padding_tokens if type(padding_tokens) is int and 0 <= padding_tokens <= _INT64_MAX else \
            _batch.count_argument("padding_tokens", padding_tokens)
        samples = samples if type(samples) is int and 0 <= samples <= _INT64_MAX else \
            _batch.count_argument("samples", samples)
        has_loss = loss_sum is not None or label_tokens is not None
        if has_loss:
            if loss_sum is None or label_tokens is None:
                raise ValueError("give loss_sum and label_tokens together (the loss is their ratio)")
            loss = _batch.float_argument("loss_sum", loss_sum)
            labels = _batch.count_argument("label_tokens", label_tokens)
        with self._lock:
            code, why = self._count_host(fmt, batch, grids, padding, samples, has_loss,
                                         loss if has_loss else 0.0, labels if has_loss else 0)
            if code == _native.E_REJECTED:
                raise ValueError(why)
        return code == _native.OK

    def _count_host(self, fmt, batch, grids, padding, samples, has_loss, loss, labels) -> Tuple[int, str]:
        """The library's one counter for a micro-batch in host memory (the caller holds the lock): its return
        code, and the message of a refusal with the library's reason ("" otherwise)."""
        mb = self._mb
        _batch.fill_microbatch(mb, fmt, batch, grids, padding)
        mb.samples = samples
        mb.has_loss = 1 if has_loss else 0
        if has_loss:
            mb.loss_sum = loss
            mb.label_tokens = labels
        if self._closed:
            return _native.E_INVALID_HANDLE, ""
        why = self._why
        code = _native.lib().flopmeter_on_microbatch_ex(self._handle, self._mb_ref, why, len(why))
        return code, _rejected(why.value.decode("utf-8", "replace")) if code == _native.E_REJECTED else ""

    def _bind_native_fast_path(self) -> Any:
        """The C fast path's binding to this plugin, made once torch is imported (None before, or when closed)."""
        facts = _batch.torch_facts or _batch.load_torch_facts()
        with self._lock:
            if facts is None or self._closed:
                return None
            if self._binding is None:
                lib = _native.lib()
                tensor, int64, int32, strided = facts
                self._binding = _batch._fastpath.Binding(
                    ctypes.cast(lib.flopmeter_on_microbatch_ex, ctypes.c_void_p).value, self._handle, tensor, int64,
                    int32, strided)
            return self._binding

    def _device_microbatch(self, fmt, value, grid_thw, padding_tokens, samples, loss_sum,
                           label_tokens) -> bool:
        device, padding, samples = _device_path.check_device_batch(fmt, value, grid_thw, padding_tokens, samples,
                                                                   loss_sum, label_tokens)
        if self._model.coefficients["vision_per_patch"] == 0 and grid_thw is not None and \
                grid_thw.numel() > 0:
            raise ValueError("grid_thw: the model has no vision tower")
        with self._lock:
            if self._closed:
                return False
            if self._device is None:
                self._device = _device_path.DeviceMicrobatches(device, self._count_host)
            self._device.put(device, fmt, value, grid_thw, loss_sum, label_tokens, padding, samples)
        return True

    def on_log(self, step: int, *, learning_rate: Optional[float] = None, grad_norm: Optional[float] = None,
               data_time: Any = None, forward_backward_time: Any = None,
               peak_memory_bytes: Optional[int] = None,
               peak_reserved_memory_bytes: Optional[int] = None) -> Optional[Dict[str, Any]]:
        """Ends the interval of `step` and starts the next; returns the record of the interval that ended one
        log earlier (None while none is due: the first log, a warm-up log before any micro-batch, a skipped
        interval, a rank that does not emit). Every rank calls it at the same steps with the same step.
        Times are seconds (a float or a datetime.timedelta); peak_memory_bytes is this rank's peak of allocated
        device memory (torch.cuda.max_memory_allocated()), peak_reserved_memory_bytes the allocator's reserved
        peak (torch.cuda.max_memory_reserved()): perf/mem_gib and perf/mem_reserved_gib, the max over the world."""
        step = _batch.count_argument("step", step, minimum=-(2**63))
        log = _native.sized(_native.Log)
        log.step = step
        fields = 0
        if learning_rate is not None:
            log.learning_rate = _batch.float_argument("learning_rate", learning_rate)
            fields |= _native.LOG_LEARNING_RATE
        if grad_norm is not None:
            log.grad_norm = _batch.float_argument("grad_norm", grad_norm)
            fields |= _native.LOG_GRAD_NORM
        if data_time is not None:
            log.data_time_seconds = _seconds("data_time", data_time)
            fields |= _native.LOG_DATA_TIME
        if forward_backward_time is not None:
            log.forward_backward_time_seconds = _seconds("forward_backward_time", forward_backward_time)
            fields |= _native.LOG_FORWARD_BACKWARD_TIME
        if peak_memory_bytes is not None:
            log.peak_memory_bytes = _batch.count_argument("peak_memory_bytes", peak_memory_bytes)
            fields |= _native.LOG_PEAK_MEMORY
        if peak_reserved_memory_bytes is not None:
            log.peak_reserved_memory_bytes = _batch.count_argument("peak_reserved_memory_bytes",
                                                                   peak_reserved_memory_bytes)
            fields |= _native.LOG_PEAK_RESERVED_MEMORY
        log.set_fields = fields
        with self._lock:
            if self._closed:
                return None
            if self._device is not None:
                self._device.drain()  # the interval's device micro-batches, before it ends
            self._box.record = None
            _native.lib().flopmeter_on_log(self._handle, ctypes.byref(log))
            record, self._box.record = self._box.record, None
        return record

    def flush(self) -> Optional[Dict[str, Any]]:
        """Waits for and emits the last interval; returns its record (or None). Later events are ignored."""
        with self._lock:
            if self._closed:
                return None
            if self._device is not None:
                self._device.drain()
            self._box.record = None
            _native.lib().flopmeter_flush(self._handle)
            record, self._box.record = self._box.record, None
        return record

    def close(self) -> Optional[Dict[str, Any]]:
        """Flushes, then frees the plugin; returns the flushed record. Later calls do nothing."""
        with self._lock:
            if self._closed:
                return None
            record = self.flush()
            self._read_health()
            self._closed = True
            if self._binding is not None:
                _batch._fastpath.disable(self._binding)  # later C fast-path calls: E_INVALID_HANDLE, no call
            self._finalizer()  # destroy, once
        return record

    def __enter__(self) -> "Meter":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"rank {self.rank} of {self.world_size}"
        return f"Meter(model={self._model.name!r}, config={self._source!r}, {state})"
