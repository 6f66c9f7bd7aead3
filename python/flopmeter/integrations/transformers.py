"""flopmeter in the Hugging Face ``Trainer`` and every trainer built on it (TRL's ``SFTTrainer``, LLaMA-Factory,
ms-swift): one call before ``trainer.train()``.

    from flopmeter.integrations.transformers import attach
    attach(trainer)
    trainer.train()

``attach`` learns by itself:
- the FLOP model, from ``trainer.model``'s config (under PEFT and DDP wrappers);
- what trains, from the parameters' ``requires_grad`` and PEFT's adapters (``[training]``: frozen parts, LoRA
  rank and targets); a regime flopmeter cannot bill exactly gets one warning naming the parameters;
- activation checkpointing, from the model (``is_activation_checkpointing``, ``is_gradient_checkpointing`` before
  transformers 5) and the checkpoint kind (reentrant or not), as the Meter's ``recompute`` (HFU);
- the parallel layout: the world from ``torch.distributed``, tensor/context/sequence parallel sizes from the
  trainer's args or accelerate's parallelism config;
- the peak: ``gpu = "auto"``; the micro-batches per optimizer step: ``gradient_accumulation_steps``.

Per micro-batch it reads the batch as the data collator made it, on the host, before anything moves it to a
device (``_batch_reader``): documents, padding, label tokens, image and video grids; after the parent
``training_step``, the sum of the micro-batch's token losses from the loss it returns (``_loss_sum``). The
training dataloader's collator is wrapped for that when the trainer builds it; a batch that did not come through it (a dataloader
that dispatches batches from rank 0, a custom one) is read in ``training_step`` instead, which copies its small
description tensors to the host.

Per log (``Trainer.log`` with a training loss), every rank closes the Meter's interval; the record of the
interval before is merged into ``logs``, so every ``report_to`` integration and ``trainer.state.log_history``
carry it. ``Trainer.log`` stamps its own current step on the entry; the record's own step is
``flopmeter/step``. The final log (``train_runtime``) flushes the last interval into it. ``floating_point_ops``
returns each micro-batch's exact FLOPs (divided among the tensor and context parallel ranks that share it, as
the Trainer sums its figure over every process), so ``trainer.state.total_flos`` is exact up to the rounding of
the Trainer's own float field and gather; ``train/flops_seen`` is the exact figure.

Hooks never raise into the training loop: a failure costs flopmeter's figures (with a warning), not the run.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Mapping, Optional

from ..meter import Meter
from . import _batch_reader, _regime
from ._timing import SpanTimer

LOG = logging.getLogger("flopmeter")
BATCH_KEY = "_flopmeter_batch"
__all__ = ["attach"]


class _Described:
    """A batch's description, carried in the batch dict from the collator to ``training_step``: an object that
    is not a tensor or a mapping, so the dataloader's pinning and accelerate's device placement pass it on as is."""

    __slots__ = ("kwargs",)

    def __init__(self, kwargs: Optional[Dict[str, Any]]) -> None:
        self.kwargs = kwargs


class _DescribingCollator:
    """The trainer's data collator, followed by the description of the batch it made."""

    def __init__(self, collator: Any, pad_token_id: Optional[int]) -> None:
        self.collator = collator
        self.pad_token_id = pad_token_id

    def __call__(self, features: Any) -> Any:
        batch = self.collator(features)
        if isinstance(batch, Mapping):
            try:
                described = _batch_reader.describe_batch(batch, pad_token_id=self.pad_token_id)
            except Exception as e:  # noqa: BLE001 - a batch flopmeter cannot read costs its figures only
                LOG.warning("flopmeter: cannot read a batch (%s); it is not counted", e)
                described = None
            batch[BATCH_KEY] = _Described(described)
        return batch

    def __getattr__(self, name: str) -> Any:  # the collator's own attributes (tokenizer, padding_free, ...)
        return getattr(self.collator, name)


def _pad_token_id(trainer: Any, model: Any) -> Optional[int]:
    return _batch_reader.pad_token_id(getattr(trainer, "processing_class", None), getattr(trainer, "tokenizer", None),
                                      getattr(model, "config", None))


def _parallel(trainer: Any) -> Dict[str, int]:
    """tp and cp from the trainer's args and accelerator."""
    return _regime.parallel_sizes([getattr(trainer.args, "parallelism_config", None),
                                   getattr(getattr(trainer, "accelerator", None), "parallelism_config", None)],
                                  getattr(trainer.args, "tp_size", None))


def meter_options(trainer: Any, options: Dict[str, Any]) -> Dict[str, Any]:
    """The Meter's keyword arguments: `options` as given, and what the trainer says for the rest."""
    return _regime.model_options(trainer.model, options, caller="attach",
                                 micro_batches_per_step=trainer.args.gradient_accumulation_steps,
                                 parallel=_parallel(trainer), args=trainer.args)


class _Attachment:
    """The Meter and the trainer methods it wraps (kept as the instance's own attributes)."""

    def __init__(self, trainer: Any, meter: Meter, pad_token_id: Optional[int], shared_by: int) -> None:
        self.trainer = trainer
        self.meter = meter
        self.pad_token_id = pad_token_id
        self.shared_by = shared_by  # the ranks that run one micro-batch together (tp * cp)
        self.fwd_bwd = SpanTimer()
        self.data = SpanTimer()
        self.flops: Optional[int] = None
        self.logged_step = -1  # the step of the last on_log: every rank closes each interval once
        self.warned = set()
        self.original = {name: getattr(trainer, name) for name in
                         ("training_step", "floating_point_ops", "log", "get_train_dataloader", "get_batch_samples")
                         if hasattr(trainer, name)}

    def install(self) -> None:
        t = self.trainer
        t.training_step = self.training_step
        t.floating_point_ops = self.floating_point_ops
        t.log = self.log
        t.get_train_dataloader = self.get_train_dataloader
        if "get_batch_samples" in self.original:
            t.get_batch_samples = self.get_batch_samples

    def _warn(self, what: str, error: BaseException) -> None:
        if what not in self.warned:  # once per kind: a hook's failure repeats every step
            self.warned.add(what)
            LOG.warning("flopmeter: %s failed (%s: %s); its figures are left out", what, type(error).__name__, error)

    # ---- the wrapped methods ----

    def get_train_dataloader(self, *args: Any, **kwargs: Any) -> Any:
        t = self.trainer
        collator = t.data_collator
        accelerator = getattr(t, "accelerator", None)
        dispatches = bool(getattr(accelerator, "dispatch_batches", False)) or bool(
            getattr(getattr(accelerator, "dataloader_config", None), "dispatch_batches", False))
        if collator is None or dispatches or isinstance(collator, _DescribingCollator):
            return self.original["get_train_dataloader"](*args, **kwargs)
        t.data_collator = _DescribingCollator(collator, self.pad_token_id)
        try:
            return self.original["get_train_dataloader"](*args, **kwargs)
        finally:
            t.data_collator = collator

    def get_batch_samples(self, *args: Any, **kwargs: Any) -> Any:
        begin = time.perf_counter()
        try:
            return self.original["get_batch_samples"](*args, **kwargs)
        finally:
            self.data.add_host_seconds(time.perf_counter() - begin)

    def training_step(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        described = None
        try:
            if isinstance(inputs, Mapping) and BATCH_KEY in inputs:
                described = inputs.pop(BATCH_KEY).kwargs
            else:
                described = _batch_reader.describe_batch(inputs, pad_token_id=self.pad_token_id)
        except Exception as e:  # noqa: BLE001
            self._warn("reading the batch", e)
        device = getattr(getattr(self.trainer, "args", None), "device", None)
        token = self.fwd_bwd.start(device)
        loss = self.original["training_step"](model, inputs, *args, **kwargs)
        self.fwd_bwd.stop(token)
        self.flops = None
        if described is not None:
            try:
                self.flops = self.meter.model.flops(**{k: v for k, v in described.items() if k in
                                                       ("cu_seqlens", "grid_thw", "padding_tokens")})
                num_items = args[0] if args else kwargs.get("num_items_in_batch")
                self._count(described, loss, num_items)
            except Exception as e:  # noqa: BLE001
                self._warn("counting a micro-batch", e)
        return loss

    def _count(self, described: Dict[str, Any], loss: Any, num_items: Any) -> None:
        kwargs = dict(described)
        labels = kwargs.pop("label_tokens", None)
        loss_sum = None
        if labels is not None:
            try:
                loss_sum = self._loss_sum(loss, num_items, labels)
            except Exception as e:  # noqa: BLE001 - an unknown loss normalisation costs train/loss only
                self._warn("reading the loss", e)
        if loss_sum is not None:
            kwargs.update(loss_sum=loss_sum, label_tokens=labels)
            device = getattr(loss_sum, "device", None)
            if device is not None and device.type != "cpu":
                # The loss stays on its device (no sync): the description goes there too, the Meter counts it there.
                for key in ("cu_seqlens", "grid_thw"):
                    if key in kwargs:
                        kwargs[key] = kwargs[key].to(device, non_blocking=True)
        self.meter.on_microbatch(**kwargs)

    def _loss_sum(self, loss: Any, num_items: Any, labels: int) -> Any:
        """The SUM of the micro-batch's per-token losses, from the loss training_step returned, undoing the
        Trainer's normalisation (transformers' Trainer.training_step and compute_loss):
        - normalised by ``num_items_in_batch`` (the model or compute_loss_func took it): loss = sum / num_items,
          times the processes that share the token average when ``average_tokens_across_devices``;
        - otherwise a mean over this micro-batch's label tokens, divided by the micro-batches of the step.
        None when the loss is not a scalar tensor."""
        t = self.trainer
        if getattr(loss, "numel", None) is None or loss.numel() != 1 or t.args.n_gpu > 1:
            return None
        loss = loss.detach().reshape(())
        scaled = getattr(t, "loss_is_scaled_for_ga", None)
        if scaled is None:
            scaled = bool(t.model_accepts_loss_kwargs and num_items is not None) or t.compute_loss_func is not None
        if scaled:
            if num_items is None:
                return None
            value = loss * num_items
            if t.args.average_tokens_across_devices and (t.model_accepts_loss_kwargs or t.compute_loss_func):
                tp = t.get_tp_size() if hasattr(t, "get_tp_size") else 1
                value = value / max(1, t.accelerator.num_processes // max(1, tp))
            return value.to(loss.dtype) if hasattr(value, "to") else value
        return loss * (t.current_gradient_accumulation_steps * labels)

    def floating_point_ops(self, inputs: Any) -> float:
        if self.flops is None:
            return self.original["floating_point_ops"](inputs)
        return self.flops / self.shared_by

    def log(self, logs: Dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        try:
            step = int(self.trainer.state.global_step)
            records = []
            if ("loss" in logs or "train_runtime" in logs) and step > self.logged_step:
                # A training log, or the final one with optimizer steps since the last log: the interval ends.
                self.logged_step = step
                records.append(self.meter.on_log(step, **self._log_times()))
            if "train_runtime" in logs:  # the end of training: the last interval's record
                records.append(self.meter.flush())
            for record in records:
                if record:
                    logs.update(merged_record(record))
        except Exception as e:  # noqa: BLE001
            self._warn("the log", e)
        return self.original["log"](logs, *args, **kwargs)

    def _log_times(self) -> Dict[str, Any]:
        times: Dict[str, Any] = {}
        for key, timer in (("forward_backward_time", self.fwd_bwd), ("data_time", self.data)):
            seconds = timer.take()
            if seconds is not None:
                times[key] = seconds
        import torch

        device = getattr(self.trainer.args, "device", None)
        if getattr(device, "type", None) == "cuda" and torch.cuda.is_available():
            times["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated(device))
            times["peak_reserved_memory_bytes"] = int(torch.cuda.max_memory_reserved(device))
        return times


def merged_record(record: Mapping[str, Any]) -> Dict[str, Any]:
    """The record's keys for a trainer's logs: ``step`` becomes ``flopmeter/step`` (the trainer stamps its own)."""
    merged = {("flopmeter/step" if key == "step" else key): value for key, value in record.items()}
    return merged


def attach(trainer: Any, **options: Any) -> Meter:
    """Meters `trainer` (a ``transformers.Trainer`` or a subclass); call it on every rank before
    ``trainer.train()``. `options` are ``flopmeter.Meter``'s keyword arguments, all optional: what is given
    replaces what attach would learn. Returns the Meter (``meter.health``, ``meter.model``)."""
    if getattr(trainer, "_flopmeter_attachment", None) is not None:
        raise RuntimeError("attach: this trainer is metered already")
    for name in ("training_step", "log", "floating_point_ops", "model", "args", "state"):
        if not hasattr(trainer, name):
            raise TypeError(f"attach: trainer must be a transformers.Trainer, got {type(trainer).__name__} "
                            f"(it has no {name})")
    options = meter_options(trainer, options)
    meter = _regime.make_meter(options)
    parallel = options.get("parallel") or {}
    shared_by = int(parallel.get("tp", 1)) * int(parallel.get("cp", 1))
    attachment = _Attachment(trainer, meter, _pad_token_id(trainer, _regime.unwrap(trainer.model)), shared_by)
    attachment.install()
    trainer._flopmeter_attachment = attachment
    return meter
