"""Records, coefficients and estimates read as values from the library (``flopmeter/c_api_values.h``).

A record arrives as numbers with indices into the plugin's names table, whose names are decoded once each; a
model report as typed values in the order of its keys, fetched once per model. Python objects are made with
the values the JSON text of the same record or report would parse to (``json.loads`` of the JSONL line, of
``flopmeter coefficients --json``): a number that is integral and below 1e21 in magnitude is an ``int`` (the
JSON writer prints it without a fraction), a non-finite one is ``None`` (JSON's null), any other a ``float``
(the shortest decimal that reads back to the same double). Thread-safety: a RecordReader is written by the
library's callback on the thread of the on_log, flush or destroy that emits; the Meter reads it under its lock.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any, Dict, List, Optional, Tuple

from . import _native

REPORT_COEFFICIENTS = 0  # FLOPMETER_REPORT_COEFFICIENTS
REPORT_ESTIMATE = 1  # FLOPMETER_REPORT_ESTIMATE
VALUE_INTEGER, VALUE_NUMBER, VALUE_BOOLEAN, VALUE_TEXT, VALUE_EMPTY_LIST = range(5)  # FLOPMETER_VALUE_*

_isfinite = math.isfinite


def json_number(value: float) -> Any:
    """The Python value ``json.loads`` gives for the library's JSON text of the double ``value``."""
    if not _isfinite(value):
        return None
    if value.is_integer() and -1e21 < value < 1e21:
        return int(value)
    return value


class RecordReader:
    """Where the record callback leaves the record it was handed, as a dict: ``{"step": N, name: value, ...}``
    in the record's order, the JSONL line's keys and values. Holds no reference to the Meter."""

    __slots__ = ("record", "callback", "_names")

    def __init__(self) -> None:
        self.record: Optional[Dict[str, Any]] = None
        self._names: List[str] = []  # the plugin's names table, decoded as far as seen
        self.callback = _native.RECORD_CALLBACK(self._deliver)

    def _deliver(self, user: Any, pointer: Any) -> None:
        try:
            r = pointer.contents
            names = self._names
            if r.num_names > len(names):
                table = r.name_table
                names.extend(table[i].decode("utf-8") for i in range(len(names), r.num_names))
            n = r.num_values
            record: Dict[str, Any] = {"step": r.step}
            for index, value in zip(r.names[:n], r.values[:n]):
                record[names[index]] = json_number(value)
            self.record = record
        except Exception:  # noqa: BLE001 - nothing may cross into C
            self.record = None


class ReportReader:
    """One report of one model: its keys fetched once (flopmeter_model_report_key), values per call."""

    __slots__ = ("_plan",)

    def __init__(self, handle: int, report: int) -> None:
        function = _native.lib().flopmeter_model_report_key
        plan: List[Tuple[Tuple[str, ...], int]] = []
        kind = ctypes.c_int(0)
        while True:
            key = function(handle, report, len(plan), ctypes.byref(kind))
            if key is None:
                break
            plan.append((tuple(key.decode("utf-8").split("/")), kind.value))
        self._plan = plan

    def read(self, function: Any, *args: Any) -> Dict[str, Any]:
        """Calls flopmeter_model_coefficients or flopmeter_model_estimate with ``args`` and builds the report."""
        values = (_native.ReportValue * max(len(self._plan), 1))()  # per call: a FlopModel is used from any thread
        count = function(*args, values, len(self._plan))
        if count < 0:
            raise ValueError(f"{function.__name__}: {_native.status_string(int(count))}")
        if count != len(self._plan):
            raise RuntimeError(f"flopmeter: {function.__name__} gave {count} values for {len(self._plan)} keys")
        return build_report(self._plan, values)


def _leaf(kind: int, value: Any) -> Any:
    if kind == VALUE_INTEGER:
        return int(value.integer)
    if kind == VALUE_NUMBER:
        return json_number(value.number)
    if kind == VALUE_BOOLEAN:
        return value.integer != 0
    if kind == VALUE_TEXT:
        return value.text.decode("utf-8")
    return []  # VALUE_EMPTY_LIST


def build_report(plan: List[Tuple[Tuple[str, ...], int]], values: Any) -> Dict[str, Any]:
    """The nested object of a report: each key a path of object keys and array indices (c_api_values.h)."""
    root: Dict[str, Any] = {}
    for (path, kind), value in zip(plan, values):
        container: Any = root
        for component, child in zip(path[:-1], path[1:]):
            if isinstance(container, list):
                if int(component) == len(container):
                    container.append([] if child.isdigit() else {})
                container = container[int(component)]
            else:
                if component not in container:
                    container[component] = [] if child.isdigit() else {}
                container = container[component]
        leaf = _leaf(kind, value)
        if isinstance(container, list):
            container.append(leaf)
        else:
            container[path[-1]] = leaf
    return root
