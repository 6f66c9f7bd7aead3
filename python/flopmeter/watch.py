"""``flopmeter.watch(model, optimizer)``: exact MFU in any PyTorch training loop, with no change to the loop.

    meter = flopmeter.watch(model, optimizer, log_every=10)
    for batch in loader:                      # the loop as it was
        loss = model(**batch).loss
        loss.backward()
        optimizer.step(); optimizer.zero_grad()
    meter.close()                             # the last record; every hook removed

What it observes:
- **Each training micro-batch**, before the model's forward, from the forward's arguments (positional ones by the
  names of ``forward``'s parameters): ``input_ids``/``inputs_embeds``, ``cu_seq_lens_q``, ``packed_seq_lengths``,
  ``position_ids``, ``attention_mask`` (padding, or document ids), ``image_grid_thw``, ``video_grid_thw``, read by
  the integrations' one batch reader (``integrations/_batch_reader.py``); ``describe(args, kwargs) -> dict`` for a
  forward whose arguments it does not know. A forward counts when ``model.training`` and gradients are enabled and
  no backward is running: evaluation, ``generate`` and rollouts (``eval()`` or ``torch.no_grad()``) are left out,
  and so is the forward that activation recomputation runs again inside the backward (``torch.utils.checkpoint``
  of the whole model), which the ``recompute`` setting bills as hardware FLOPs instead.
- **Each optimizer step** (``optimizer.step()`` of the innermost torch optimizer: under Accelerate's wrapper, the
  step that really runs): the micro-batches since the step before are its accumulation, counted, not configured.
  Every ``log_every`` steps the interval closes (``Meter.on_log``, a collective: every rank steps alike); with
  ``log_every=None`` the caller calls ``meter.on_log(step)``.
- **Time**, without a device synchronisation: CUDA events when the model's parameters are on a CUDA device when
  ``watch`` is called, ``time.perf_counter`` otherwise, marked at the hooks and read one log later, when the
  interval's record is emitted: the interval's wall time, the time inside training steps (from a step's first
  training forward to the end of its ``optimizer.step``), forward+backward (to the start of ``optimizer.step``),
  the time between steps, ``perf/goodput`` and the MFU over step time (METRICS.md, "watch: goodput").
- **The model** as ``attach`` learns it (``integrations/_regime.py``): its Hugging Face config, what trains,
  LoRA, activation checkpointing, tensor/context parallel sizes from Accelerate's state. Call ``watch`` once the
  model is set up for training (adapters added, parts frozen, checkpointing on).

Micro-batches whose index arrays live on a CUDA device are copied to pinned host memory behind an event and read
when the event has fired; at a log, the interval's copies not yet landed are waited for (each was queued ahead of
its micro-batch's forward). Records go to ``on_record(record)``, to the configured sinks, and, while a Weights &
Biases run is active, to ``wandb.log`` (``_delivery.py``). A hook that fails warns once and never raises into the
loop. Pipeline-parallel stage modules are refused (a stage sees activations, not the micro-batch).

Thread-safety: the hooks run on the training thread; ``on_log``, ``flush`` and ``close`` may be called from any
thread, serialised by the Meter.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional

from .integrations import _batch_reader, _hooks, _regime
from .integrations._delivery import Delivery
from .integrations._timing import Clock
from .meter import Meter

LOG = logging.getLogger("flopmeter")
__all__ = ["watch", "WatchedMeter"]

# The batch keys the reader reads, and those of them whose values it needs (the others: their shapes only).
_VALUE_KEYS = ("cu_seq_lens_q", "packed_seq_lengths", "position_ids", "text_position_ids", "attention_mask",
               "image_grid_thw", "video_grid_thw")
_SHAPE_KEYS = ("input_ids", "inputs_embeds", "labels")
_NOT_WHOLE_ROWS = frozenset(_VALUE_KEYS)
_PIPELINE_TYPES = ("PipelineModule", "PipelineStage", "_PipelineStageBase", "PipelineStageBase")
_WATCHED: "weakref.WeakValueDictionary[int, WatchedMeter]" = weakref.WeakValueDictionary()


class _Interval:
    __slots__ = ("start", "end", "spans", "steps", "microbatches")

    def __init__(self, start: Any) -> None:
        self.start = start
        self.end: Any = None
        self.spans: List[tuple] = []  # (first forward, optimizer.step begins, optimizer.step ended) per step
        self.steps = 0
        self.microbatches = 0


class WatchedMeter(Meter):
    """The Meter ``watch`` returns: a ``Meter`` whose ``on_log``, ``flush`` and ``close`` also time the interval,
    add the watch's figures to the record and deliver it; ``close()`` removes every hook first."""

    def _start_watch(self, torch: Any, model: Any, optimizer: Any, log_every: Optional[int],
                     describe: Optional[Callable[..., Any]], delivery: Delivery, pad_token_id: Optional[int]) -> None:
        self._torch = torch
        self._module = model
        self._log_every = log_every
        self._describe = describe
        self._delivery = delivery
        self._pad_token_id = pad_token_id
        self._warned: set = set()
        self._native = _hooks.torch_has_hooks(torch)
        self._graph_task = getattr(torch._C, "_current_graph_task_id", None) if self._native else None
        self._backward = None if self._native else _hooks.BackwardWatch(torch)
        self._positional = _positional_names(model)
        self._rows_shape: Any = None  # the last whole-rows batch's shape, its boundaries and rows
        self._rows_cu: Any = None
        self._rows_samples = 0
        self._pending: List[tuple] = []  # (event, host batch) of device micro-batches not read yet
        param = next(iter(model.parameters()), None)
        self._clock = Clock(param is not None and param.device.type == "cuda" and torch.cuda.is_available())
        self._interval = _Interval(self._clock.mark())
        self._closed_intervals: Dict[int, _Interval] = {}
        self._step_begin: Any = None
        self._step_forward_end: Any = None
        self._steps = 0
        self._handles = _hooks._Handles()
        self._watching = True
        _hooks.install_forward(torch, model, self._before_forward, self._after_forward, self._native, self._handles)
        if optimizer is not None:
            _hooks.install_step(torch, _hooks.innermost_optimizer(torch, optimizer), self._before_step,
                                self._after_step, self._native, self._handles)
        if not self._native:
            LOG.info("flopmeter.watch: torch %s has no keyword forward pre-hooks or optimizer step hooks (2.0 on); "
                     "model.forward and optimizer.step are wrapped on their instances instead, until close()",
                     torch.__version__)

    # ---- the hooks (never raise) ----

    def _warn(self, what: str, error: BaseException) -> None:
        if what not in self._warned:
            self._warned.add(what)
            LOG.warning("flopmeter.watch: %s failed (%s: %s); its figures are left out", what, type(error).__name__,
                        error)

    def _before_forward(self, args: tuple, kwargs: Mapping[str, Any]) -> bool:
        try:
            if not (self._watching and self._module.training and self._torch.is_grad_enabled()):
                return False
            if self._graph_task is not None:
                if self._graph_task() != -1:
                    return False  # inside a backward: activation recomputation, not a new micro-batch
            elif self._backward.running:
                return False
            if self._pending:
                self._read_pending(wait=False)
            if self._step_begin is None:
                self._step_begin = self._clock.mark()
            self._interval.microbatches += 1
            self._count(args, kwargs)
            return True
        except Exception as e:  # noqa: BLE001
            self._warn("counting a micro-batch", e)
            return False

    def _after_forward(self, token: Any, output: Any) -> None:
        try:
            self._backward.watch_output(output)
        except Exception as e:  # noqa: BLE001
            self._warn("watching the backward", e)

    def _before_step(self) -> None:
        try:
            if self._watching and self._step_begin is not None:
                self._step_forward_end = self._clock.mark()
        except Exception as e:  # noqa: BLE001
            self._warn("timing the optimizer step", e)

    def _after_step(self) -> None:
        try:
            if not self._watching:
                return
            self._steps += 1
            interval = self._interval
            interval.steps += 1
            if self._step_begin is not None:
                end = self._clock.mark()
                interval.spans.append((self._step_begin, self._step_forward_end or end, end))
            self._step_begin = self._step_forward_end = None
            if self._log_every and self._steps % self._log_every == 0:
                self.on_log(self._steps)
        except Exception as e:  # noqa: BLE001
            self._warn("the step's log", e)

    # ---- reading the micro-batch ----

    def _count(self, args: tuple, kwargs: Mapping[str, Any]) -> None:
        if self._describe is not None:
            described = self._describe(args, kwargs)
            if described is not None:
                self.on_microbatch(**dict(described))
            return
        batch: Mapping[str, Any] = kwargs
        if args:
            batch = dict(zip(self._positional, args))
            batch.update(kwargs)
        ids = batch.get("input_ids")
        if ids is None:
            ids = batch.get("inputs_embeds")
        if ids is not None and _NOT_WHOLE_ROWS.isdisjoint(batch):
            # Whole rows (no mask, positions or boundaries): every slot a token, each row a document. The
            # boundaries depend on the shape only, so the last shape's tensor goes to the C fast path again.
            shape = ids.shape
            if shape != self._rows_shape:
                rows, length = (int(shape[0]), int(shape[1])) if len(shape) >= 2 else (1, int(shape[0]))
                self._rows_cu = self._torch.arange(0, rows * length + 1, max(1, length), dtype=self._torch.int64)
                self._rows_samples, self._rows_shape = rows, shape
            self.on_microbatch(cu_seqlens=self._rows_cu, samples=self._rows_samples)
            return
        if any(getattr(getattr(batch.get(k), "device", None), "type", "cpu") != "cpu" for k in _VALUE_KEYS):
            self._pending.append(self._copy_to_host(batch))
            return
        self._count_read_batch(batch)

    def _count_read_batch(self, batch: Mapping[str, Any]) -> None:
        described = _batch_reader.describe_batch(batch, pad_token_id=self._pad_token_id, count_labels=False)
        if described is None:
            if "no batch" not in self._warned:
                self._warned.add("no batch")
                LOG.warning("flopmeter.watch: a training forward of %s had no batch flopmeter can read "
                            "(arguments: %s); pass watch(..., describe=...)", type(self._module).__name__,
                            ", ".join(sorted(batch)) or "none")
            return
        self.on_microbatch(**described)  # no loss: the loop's loss normalisation is its own

    def _copy_to_host(self, batch: Mapping[str, Any]) -> tuple:
        """The batch's index arrays copied to pinned host memory behind an event; the token tensors by shape."""
        torch = self._torch
        host: Dict[str, Any] = {}
        trims_tail = self._pad_token_id is not None
        for key, value in batch.items():
            if not isinstance(value, torch.Tensor):
                continue
            if key in _VALUE_KEYS or (trims_tail and key in ("input_ids", "labels")):
                if value.device.type == "cpu":
                    host[key] = value
                else:
                    buffer = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
                    buffer.copy_(value, non_blocking=True)
                    host[key] = buffer
            elif key in _SHAPE_KEYS:
                host[key] = torch.zeros((), dtype=torch.int8).expand(*value.shape)
        event = torch.cuda.Event()
        event.record()
        return event, host

    def _read_pending(self, wait: bool) -> None:
        while self._pending and (wait or self._pending[0][0].query()):
            event, host = self._pending.pop(0)
            event.synchronize()
            try:
                self._count_read_batch(host)
            except Exception as e:  # noqa: BLE001
                self._warn("counting a micro-batch", e)

    # ---- the Meter's log, flush and close ----

    def on_log(self, step: int, **kwargs: Any) -> Optional[Dict[str, Any]]:
        with self._lock:
            if self._watching:
                self._read_pending(wait=True)
                interval = self._interval
                interval.end = self._clock.mark()
                self._interval = _Interval(interval.end)
                if isinstance(step, int):
                    self._closed_intervals[step] = interval
            record = super().on_log(step, **kwargs)
            return self._finish(record)

    def flush(self) -> Optional[Dict[str, Any]]:
        with self._lock:
            return self._finish(super().flush())

    def close(self) -> Optional[Dict[str, Any]]:
        with self._lock:
            self._stop_watching()
            return super().close()

    def _stop_watching(self) -> None:
        if getattr(self, "_watching", False):
            self._watching = False
            self._handles.remove()
            self._pending = []
            for key, meter in list(_WATCHED.items()):
                if meter is self:
                    _WATCHED.pop(key, None)

    def _finish(self, record: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
        if not record:
            return record
        try:
            step = record.get("step")
            interval = self._closed_intervals.pop(step, None) if isinstance(step, int) else None
            for older in [k for k in self._closed_intervals if isinstance(step, int) and k <= step]:
                del self._closed_intervals[older]
            if interval is not None:
                record.update(_interval_figures(self._clock, interval, record))
        except Exception as e:  # noqa: BLE001
            self._warn("timing the interval", e)
        delivery = getattr(self, "_delivery", None)
        if delivery is not None:
            delivery.deliver(record, self._warn)
        return record

    def __repr__(self) -> str:
        watched = type(getattr(self, "_module", None)).__name__
        state = "watching" if getattr(self, "_watching", False) else "closed" if self._closed else "not watching"
        return f"WatchedMeter(model={self.model.name!r}, {watched}, {state}, rank {self.rank} of {self.world_size})"


def _interval_figures(clock: Clock, interval: _Interval, record: Mapping[str, Any]) -> Dict[str, float]:
    """The watch's figures of one interval (METRICS.md, "watch: goodput"), this rank's."""
    figures: Dict[str, float] = {"train/optimizer_steps": float(interval.steps)}
    if interval.steps:
        per_step = interval.microbatches / interval.steps
        figures["train/microbatches_per_step"] = per_step
        if isinstance(record.get("perf/step_time"), (int, float)):
            figures["perf/optimizer_step_time"] = float(record["perf/step_time"]) * per_step
    wall = clock.seconds(interval.start, interval.end)
    figures["perf/wall_time"] = wall
    if interval.spans and wall > 0:
        in_step = sum(clock.seconds(begin, end) for begin, _, end in interval.spans)
        figures["perf/in_step_time"] = in_step
        figures["perf/step_fwd_bwd_time"] = sum(clock.seconds(begin, mid) for begin, mid, _ in interval.spans)
        figures["perf/between_steps_time"] = max(0.0, wall - in_step)
        goodput = min(1.0, in_step / wall)
        figures["perf/goodput"] = goodput
        mfu = record.get("perf/mfu")
        if isinstance(mfu, (int, float)) and goodput > 0:
            figures["perf/mfu_step_time"] = float(mfu) / goodput
    return figures


def _positional_names(model: Any) -> List[str]:
    """The names of ``model.forward``'s positional parameters, in order."""
    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _accelerate_parallel() -> Dict[str, int]:
    """tp and cp from Accelerate's state, when the loop made an Accelerator with a parallelism config."""
    import sys

    state_module = sys.modules.get("accelerate.state")
    if state_module is None:
        return {}
    try:
        shared = getattr(state_module.AcceleratorState, "_shared_state", None)
        if not shared:
            return {}
        config = getattr(state_module.AcceleratorState(), "parallelism_config", None)
        return _regime.parallel_sizes([config])
    except Exception:  # noqa: BLE001 - an Accelerate without this state: nothing learned
        return {}


def watch(model: Any, optimizer: Any = None, /, *, log_every: Optional[int] = 1,
          on_record: Optional[Callable[[Dict[str, Any]], Any]] = None,
          describe: Optional[Callable[[tuple, Mapping[str, Any]], Optional[Mapping[str, Any]]]] = None,
          wandb: bool = True, **options: Any) -> WatchedMeter:
    """Meters every training micro-batch of `model` (a ``torch.nn.Module``: the model the loop calls, under any
    DDP, FSDP or PEFT wrapper) and closes a step at each ``optimizer.step()`` of `optimizer`; call it on every
    rank, at the same point, before training. `options` are ``flopmeter.Meter``'s keyword arguments, all optional:
    what is given replaces what watch would learn (``model=`` for a model without a Hugging Face config: `model`
    and `optimizer` are positional only, so ``model=`` is the Meter's).

    ``log_every``: steps per log (an int >= 1), or None to log only when the caller calls ``meter.on_log``.
    Without an `optimizer` no step is seen: the caller logs (``meter.on_log(step)``), and the records carry no
    accumulation and no goodput.
    ``on_record(record)``: called with each record. ``describe(args, kwargs)``: the forward's arguments to
    ``Meter.on_microbatch``'s keyword arguments (a dict, or None to count nothing), for a forward the batch reader
    does not know. ``wandb``: log each record to the active W&B run (if any). Returns the Meter; ``close()`` flushes
    and removes every hook. Raises RuntimeError for a model watched already, TypeError or ValueError naming the
    argument that is not what it must be."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"watch: model must be a torch.nn.Module, got {type(model).__name__}")
    if optimizer is not None and not callable(getattr(optimizer, "step", None)):
        raise TypeError(f"watch: optimizer must have a step() method, got {type(optimizer).__name__}")
    if log_every is not None and (not isinstance(log_every, int) or isinstance(log_every, bool) or log_every < 1):
        raise ValueError(f"watch: log_every must be an int >= 1 or None, got {log_every!r}")
    for name, value in (("on_record", on_record), ("describe", describe)):
        if value is not None and not callable(value):
            raise TypeError(f"watch: {name} must be callable, got {type(value).__name__}")
    base = _regime.unwrap(model)
    for candidate in (model, base):
        if type(candidate).__name__ in _PIPELINE_TYPES:
            raise ValueError(f"watch: {type(candidate).__name__} is a pipeline-parallel stage: a stage's forward "
                             "sees activations, not the micro-batch. Call Meter.on_microbatch with the whole "
                             "micro-batch on every rank instead (METRICS.md, \"watch\")")
    if int(dict(options.get("parallel") or {}).get("pp", 1)) > 1:
        raise ValueError("watch: parallel.pp > 1: pipeline-parallel stages are not watched (a stage's forward "
                         "sees activations, not the micro-batch); call Meter.on_microbatch on every rank instead")
    for candidate in (model, base):
        if id(candidate) in _WATCHED:
            raise RuntimeError(f"watch: this model is watched already ({_WATCHED[id(candidate)]!r}); "
                               "close that meter first")
    sinks_given = "sinks" in options
    options = _regime.model_options(model, options, caller="watch", parallel=_accelerate_parallel())
    if options.get("config") is None and not sinks_given:
        options["sinks"] = {"console": True}  # a hand loop has no logger of its own to hand records to
    meter = _regime.make_meter(options, cls=WatchedMeter)
    pad = _batch_reader.pad_token_id(getattr(base, "config", None), getattr(base, "generation_config", None))
    try:
        meter._start_watch(torch, model, optimizer, log_every, describe, Delivery(on_record, wandb), pad)
    except BaseException:
        meter._stop_watching()
        meter.close()
        raise
    _WATCHED[id(model)] = meter
    _WATCHED[id(base)] = meter
    return meter
