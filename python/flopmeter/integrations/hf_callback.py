"""flopmeter as a Hugging Face ``TrainerCallback``, for trainers that build the ``Trainer`` themselves and take
callbacks: LLaMA-Factory (``run_exp(callbacks=[...])``), ms-swift (its ``extra_callbacks``, ``ms_swift.py``), or
any ``Trainer(callbacks=[...])``.

    from flopmeter.integrations.hf_callback import FlopmeterTrainerCallback
    run_exp(callbacks=[FlopmeterTrainerCallback()])        # LLaMA-Factory

At ``on_train_begin`` the callback attaches to the trainer that called it (``attach``, in ``transformers.py``:
the same batch reader, regime reader, records and logs), so every log of the run carries flopmeter's figures
from the first step. A callback is handed the model and the optimizer, not the trainer, so it finds the trainer
as the caller whose callback handler holds this callback (the ``self`` of ``Trainer._inner_training_loop``, a
few frames up). Batches made before that point were never described by attach's collator, so each is read in
``training_step`` (its small description tensors copied to the host). A trainer that cannot be found (a loop
that calls callbacks itself) gets one warning and no figures.

Options are ``flopmeter.Meter``'s keyword arguments, as for ``attach``; ``meter`` is the Meter once attached.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Optional

from transformers import TrainerCallback

from . import transformers as _attach

LOG = logging.getLogger("flopmeter")
__all__ = ["FlopmeterTrainerCallback"]
_FRAMES = 12  # how far up on_train_begin's callers the trainer is looked for


def calling_trainer(callback: Any) -> Optional[Any]:
    """The ``Trainer`` whose callback handler holds `callback` and is on the call stack, or None."""
    frame = inspect.currentframe()
    try:
        for _ in range(_FRAMES):
            if frame is None:
                return None
            candidate = frame.f_locals.get("self")
            handler = getattr(candidate, "callback_handler", None)
            if handler is not None and any(c is callback for c in getattr(handler, "callbacks", ())) and \
                    hasattr(candidate, "training_step"):
                return candidate
            frame = frame.f_back
        return None
    finally:
        del frame


class FlopmeterTrainerCallback(TrainerCallback):
    """Attaches flopmeter to the calling trainer when its training begins (the module docstring)."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.meter: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.meter is not None:
            return
        try:
            trainer = calling_trainer(self)
            if trainer is None:
                LOG.warning("flopmeter: FlopmeterTrainerCallback found no Trainer that called it; nothing is "
                            "metered (attach(trainer) instead)")
                return
            existing = getattr(trainer, "_flopmeter_attachment", None)
            self.meter = existing.meter if existing is not None else _attach.attach(trainer, **self.options)
        except Exception as e:  # noqa: BLE001 - a callback never stops the run
            LOG.warning("flopmeter: FlopmeterTrainerCallback could not attach (%s: %s); nothing is metered",
                        type(e).__name__, e)
