"""flopmeter as a Lightning callback: ``Trainer(callbacks=[FlopmeterCallback()])``.

``FlopmeterCallback`` is a ``pytorch_lightning.Callback``, and a ``lightning.pytorch.Callback`` where the
unified ``lightning`` package is installed (whichever of the two the user's Trainer checks against).

- The model: ``pl_module.config`` (or ``pl_module.model.config``) when it is a Hugging Face config, else the
  ``model=`` option. What trains: the parameters' ``requires_grad`` and PEFT's adapters, as in the Hugging Face
  integration. Micro-batches per optimizer step: the trainer's ``accumulate_grad_batches``.
- Each micro-batch: ``describe(batch) -> dict`` maps the user's batch to ``Meter.on_microbatch``'s keyword
  arguments. Without it, a dict batch is read as a Hugging Face batch (``input_ids``, ``position_ids``,
  ``cu_seq_lens_q``, ``attention_mask``, ``labels``, ``image_grid_thw``, ...). The batch is read on the host,
  in ``on_before_batch_transfer``, before Lightning moves it to the device.
- Each optimizer step closes the Meter's interval on every rank; the record of the interval before goes to
  ``pl_module.log_dict`` (so to every logger of the trainer); the last one, flushed at the end of training, to
  the trainer's loggers.

Hooks never raise into the training loop: a failure costs flopmeter's figures (with a warning), not the run.
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ..meter import Meter
from . import _batch_reader, _regime
from ._timing import SpanTimer

LOG = logging.getLogger("flopmeter")
__all__ = ["FlopmeterCallback"]


def _callback_bases() -> Tuple[type, ...]:
    bases = []
    for module in ("pytorch_lightning", "lightning.pytorch"):
        try:
            bases.append(importlib.import_module(module).Callback)
        except ImportError:
            continue
    if not bases:
        raise ImportError("flopmeter.integrations.lightning needs pytorch-lightning or lightning: "
                          "pip install flopmeter[lightning]")
    return tuple(bases)


class _FlopmeterCallback:
    """The callback's behaviour; ``FlopmeterCallback`` adds the Lightning base classes installed."""

    def __init__(self, describe: Optional[Callable[[Any], Mapping[str, Any]]] = None, **options: Any) -> None:
        if describe is not None and not callable(describe):
            raise TypeError(f"describe must be a callable batch -> dict, got {type(describe).__name__}")
        self.describe = describe
        self.options = options
        self.meter: Optional[Meter] = None
        self._pending: Optional[Dict[str, Any]] = None
        self._fwd_bwd = SpanTimer()
        self._data = SpanTimer()
        self._span: Any = None
        self._batch_end: Optional[float] = None
        self._last_step: Optional[int] = None
        self._warned = set()

    def _warn(self, what: str, error: BaseException) -> None:
        if what not in self._warned:
            self._warned.add(what)
            LOG.warning("flopmeter: %s failed (%s: %s); its figures are left out", what, type(error).__name__, error)

    def _meter_options(self, trainer: Any, pl_module: Any) -> Dict[str, Any]:
        return _regime.model_options(pl_module, self.options, caller="FlopmeterCallback",
                                     micro_batches_per_step=getattr(trainer, "accumulate_grad_batches", 1))

    # ---- Lightning hooks ----

    def setup(self, trainer: Any, pl_module: Any, stage: Optional[str] = None) -> None:
        if stage not in (None, "fit") or self.meter is not None:
            return
        self.meter = _regime.make_meter(self._meter_options(trainer, pl_module))  # every rank, at the same point
        original = pl_module.on_before_batch_transfer

        def on_before_batch_transfer(batch: Any, dataloader_idx: int) -> Any:
            batch = original(batch, dataloader_idx)
            if getattr(trainer, "training", False):
                self._pending = self._describe(batch)
            return batch

        pl_module.on_before_batch_transfer = on_before_batch_transfer

    def _describe(self, batch: Any) -> Optional[Dict[str, Any]]:
        try:
            if self.describe is not None:
                described = self.describe(batch)
                return None if described is None else dict(described)
            return _batch_reader.describe_batch(batch)
        except Exception as e:  # noqa: BLE001
            self._warn("reading the batch", e)
            return None

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, *args: Any) -> None:
        if self.meter is None:
            return
        if self._batch_end is not None:
            self._data.add_host_seconds(time.perf_counter() - self._batch_end)
        described, self._pending = self._pending, None
        if described is None:
            described = self._describe(batch)
        if described is not None:
            try:
                described.pop("label_tokens", None)
                self.meter.on_microbatch(**described)
            except Exception as e:  # noqa: BLE001
                self._warn("counting a micro-batch", e)
        self._span = self._fwd_bwd.start(getattr(pl_module, "device", None))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                           *args: Any) -> None:
        if self.meter is None:
            return
        if self._span is not None:
            self._fwd_bwd.stop(self._span)
            self._span = None
        step = int(trainer.global_step)
        if self._last_step is None:
            self._last_step = 0
        if step != self._last_step:  # an optimizer step ran in this batch: the interval ends, on every rank
            self._last_step = step
            try:
                times = {}
                for key, timer in (("forward_backward_time", self._fwd_bwd), ("data_time", self._data)):
                    seconds = timer.take()
                    if seconds is not None:
                        times[key] = seconds
                record = self.meter.on_log(step, **times)
                if record:
                    pl_module.log_dict(_loggable(record), on_step=True, on_epoch=False, rank_zero_only=True)
            except Exception as e:  # noqa: BLE001
                self._warn("the log", e)
        self._batch_end = time.perf_counter()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.meter is None:
            return
        try:
            record = self.meter.flush()
            if record:
                for logger in getattr(trainer, "loggers", []):
                    logger.log_metrics(_loggable(record), step=int(record.get("step", trainer.global_step)))
                    logger.save()
        except Exception as e:  # noqa: BLE001
            self._warn("the last log", e)


def _loggable(record: Mapping[str, Any]) -> Dict[str, float]:
    """The record's numbers (a logger takes numbers only); its step as ``flopmeter/step``."""
    return {("flopmeter/step" if k == "step" else k): float(v) for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


FlopmeterCallback = type("FlopmeterCallback", (_FlopmeterCallback,) + _callback_bases(),
                         {"__doc__": _FlopmeterCallback.__doc__ or __doc__, "__module__": __name__})
