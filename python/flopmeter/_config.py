"""A plugin configuration given in code (keyword arguments or a dict mirroring the plugin TOML's tables), or a
plugin TOML path, as the library's typed configuration builder (``flopmeter_config_*``, c_api_config.h).

Only the shape is checked here (tables are dicts, values are bools, numbers, strings or lists of strings): each
key is handed to the library by its path (``parallel.tp``) as a typed value, and the library judges it by the
rules a plugin file's keys get, with the same message, naming the key path and the value
(``key 'parallel.tp': must be > 0 (got 0)``); a key read from a file keeps its file:line:col.
Thread-safety: each Config is used by one thread at a time.
"""

from __future__ import annotations

import ctypes
import math
import numbers
import os
from typing import Any, Dict, Mapping, Optional

from . import _native
from .errors import ConfigError
from .model import resolve_model

# The tables of plugin_configs/SCHEMA.md; unknown keys inside them are the library's to refuse.
TABLES = ("model", "peak", "parallel", "logging", "sinks", "training")
_INT64 = (-(2**63), 2**63 - 1)


class Config:
    """A flopmeter_config: made from a plugin TOML path (``path``) and/or tables of keys (``tables``, laid over
    the file's key by key). Raises ConfigError naming the key path. Frees itself on ``close()`` (or ``with``)."""

    def __init__(self, tables: Optional[Mapping[str, Any]] = None, path: Optional[str] = None) -> None:
        self._lib = _native.lib()
        self._error = _native.error_buffer()
        self.handle = self._lib.flopmeter_config_new()
        if not self.handle:
            raise MemoryError("flopmeter_config_new")
        try:
            if path is not None:
                self._check(self._lib.flopmeter_config_load_file(self.handle, os.fsencode(path), self._error,
                                                                 len(self._error)))
            for table, content in _tables(tables or {}):
                for key, value in content.items():
                    if not isinstance(key, str):
                        raise ConfigError(f"key '{table}.{key!r}': keys must be strings")
                    self._set(f"{table}.{key}", value)
        except BaseException:
            self.close()
            raise

    def small_allreduce(self) -> str:
        """``[logging] small_allreduce`` by the library's rule ("automatic" when unset); "automatic" also for a
        value that names no algorithm, which create then reports at its key."""
        out = ctypes.c_int(0)
        code = self._lib.flopmeter_config_small_allreduce(self.handle, ctypes.byref(out), self._error,
                                                          len(self._error))
        return _native.SMALL_ALLREDUCE_NAMES.get(out.value, "automatic") if code == _native.OK else "automatic"

    def close(self) -> None:
        if self.handle:
            self._lib.flopmeter_config_destroy(self.handle)
            self.handle = None

    def __enter__(self) -> "Config":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _check(self, code: int) -> None:
        if code != _native.OK:
            raise ConfigError(self._error.value.decode("utf-8", "replace"))

    def _set(self, path: str, value: Any) -> None:
        lib, key, error, size = self._lib, path.encode("utf-8"), self._error, len(self._error)
        if isinstance(value, bool):
            code = lib.flopmeter_config_set_bool(self.handle, key, int(value), error, size)
        elif isinstance(value, numbers.Integral):
            number = int(value)
            if not _INT64[0] <= number <= _INT64[1]:
                raise ConfigError(f"key '{path}': {number} is outside the 64-bit integer range")
            code = lib.flopmeter_config_set_int(self.handle, key, number, error, size)
        elif isinstance(value, numbers.Real):
            number = float(value)
            if not math.isfinite(number):
                raise ConfigError(f"key '{path}': must be finite (got {number})")
            code = lib.flopmeter_config_set_double(self.handle, key, number, error, size)
        elif isinstance(value, (str, os.PathLike)):
            text = os.fspath(value)
            if path == "model.config":
                try:
                    text = os.path.abspath(resolve_model(text))  # a shipped name, or a path from here
                except ConfigError as e:
                    raise ConfigError(f"key '{path}': {e}") from None
            code = lib.flopmeter_config_set_string(self.handle, key, _utf8(path, text), error, size)
        elif isinstance(value, (list, tuple)):
            items = []
            for i, item in enumerate(value):
                if not isinstance(item, str):
                    raise ConfigError(f"key '{path}': the plugin config's lists hold strings, got {value!r}")
                items.append(_utf8(f"{path}[{i}]", item))
            array = (ctypes.c_char_p * len(items))(*items)
            code = lib.flopmeter_config_set_string_list(self.handle, key, array, len(items), error, size)
        else:
            raise ConfigError(f"key '{path}': a {type(value).__name__} is not a value of the plugin config "
                              f"(give a bool, number, str or list of str), got {value!r}")
        self._check(code)


def _utf8(path: str, text: str) -> bytes:
    if "\0" in text:
        raise ConfigError(f"key '{path}': must not contain a NUL character (got {text!r})")
    return text.encode("utf-8", "surrogateescape")


def _tables(tables: Mapping[str, Any]):
    """(table, dict of keys) of `tables`, in SCHEMA.md's order; the shape checked (tables known, dicts)."""
    for table in tables:
        if table not in TABLES:
            raise ConfigError(f"key '{table}': not a table of the plugin config (tables: {', '.join(TABLES)})")
    for table in TABLES:
        content = tables.get(table)
        if content is None:
            continue
        if table == "model" and isinstance(content, (str, os.PathLike)):
            content = {"config": content}
        if not isinstance(content, Mapping):
            raise ConfigError(f"key '{table}': must be a table (a dict), got {type(content).__name__} {content!r}")
        yield table, content


def model_table(model: Any) -> Dict[str, Any]:
    """The [model] table of `model`: a name or path is its `config`, None an empty table."""
    if model is None:
        return {}
    if isinstance(model, (str, os.PathLike)):
        return {"config": model}
    if isinstance(model, Mapping):
        return dict(model)
    raise ConfigError(f"key 'model': must be a model name, a path or a table (a dict), got {type(model).__name__}")


def merge_tables(config: Mapping[str, Any], overrides: Dict[str, Any]) -> Dict[str, Any]:
    """`config`'s tables with the keyword tables laid over them, key by key."""
    merged: Dict[str, Any] = {}
    config = dict(config)
    if "model" in config:
        config["model"] = model_table(config["model"])
    overrides = dict(overrides)
    if overrides.get("model") is not None:
        overrides["model"] = model_table(overrides["model"])
    for name, content in config.items():
        merged[name] = dict(content) if isinstance(content, Mapping) else content
    for name, content in overrides.items():
        if content is None:
            continue
        if isinstance(merged.get(name), dict) and isinstance(content, Mapping):
            merged[name].update(content)
        else:
            merged[name] = dict(content) if isinstance(content, Mapping) else content
    return merged
