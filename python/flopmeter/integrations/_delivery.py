"""Where ``flopmeter.watch`` hands each record: the caller's ``on_record`` and, while a Weights & Biases run is
active, ``wandb.log`` (the configured sinks get it from the library itself).

W&B keeps one step counter per run and refuses a log to a step before its current one, and a record arrives
one log after its interval (deferred emission). So the record is not logged at a step of its own: its keys are
declared with ``define_metric(key, step_metric="flopmeter/step")`` and logged, with ``flopmeter/step``, into the
row the run has open (``commit=False``), which the loop's own next ``wandb.log`` commits; W&B's charts draw each
key against ``flopmeter/step``, so the record lands on its own step whatever the run's counter says. When the
run's step has not moved since the previous record (the loop logs nothing to W&B in between), that row is
committed first, so no record overwrites another. The run's counter then moves at most once per record, never
ahead of a loop that logs every optimizer step with ``step=`` its optimizer step.

Record names are those MLflow accepts too (letters, digits, ``_ - . /`` and spaces): any other character of a
key becomes ``_``.

Thread-safety: one instance per watch, used under the Meter's lock.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Callable, Dict, Optional

STEP_KEY = "flopmeter/step"
_MLFLOW_UNSAFE = re.compile(r"[^0-9A-Za-z_\-./ ]")


def mlflow_name(key: str) -> str:
    """`key` with every character MLflow refuses in a metric name replaced by ``_``."""
    return _MLFLOW_UNSAFE.sub("_", key)


def numbers(record: Dict[str, Any]) -> Dict[str, float]:
    """The record's numbers for a logger, its ``step`` as ``flopmeter/step``, names MLflow accepts."""
    return {(STEP_KEY if key == "step" else mlflow_name(key)): value for key, value in record.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


class Delivery:
    def __init__(self, on_record: Optional[Callable[[Dict[str, Any]], Any]], wandb: bool) -> None:
        self.on_record = on_record
        self.wandb = wandb
        self._run: Any = None
        self._defined: set = set()
        self._run_step: Optional[int] = None

    def deliver(self, record: Dict[str, Any], warn: Callable[[str, BaseException], None]) -> None:
        for key in [k for k in record if _MLFLOW_UNSAFE.search(k)]:
            record[mlflow_name(key)] = record.pop(key)
        if self.on_record is not None:
            try:
                self.on_record(record)
            except Exception as e:  # noqa: BLE001 - the callback's failure costs its records only
                warn("on_record", e)
        if self.wandb:
            try:
                self._to_wandb(record)
            except Exception as e:  # noqa: BLE001
                warn("wandb.log", e)

    def _to_wandb(self, record: Dict[str, Any]) -> None:
        wandb = sys.modules.get("wandb")
        run = getattr(wandb, "run", None) if wandb is not None else None
        if run is None:
            return
        if run is not self._run:
            self._run, self._defined, self._run_step = run, set(), None
            run.define_metric(STEP_KEY)
        data = numbers(record)
        for key in data:
            if key != STEP_KEY and key not in self._defined:
                run.define_metric(key, step_metric=STEP_KEY)
                self._defined.add(key)
        if self._run_step is not None and run.step == self._run_step:
            run.log({}, commit=True)  # the loop logged nothing since the last record: its row is closed first
        run.log(data, commit=False)
        self._run_step = run.step
