"""A plugin configuration given in code (keyword arguments or a dict mirroring the plugin TOML's tables),
written as plugin TOML text for the library, which validates it with the same rules as a file.

Only the shape is checked here (tables are dicts, values are TOML scalars or lists of them): the values
themselves are the library's to judge, so that a key given in code and one in a file get the same rule and
the same message, naming the key (``parallel.tp``). Thread-safety: pure functions.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from typing import Any, Dict, Mapping

from .errors import ConfigError
from .model import resolve_model

# The tables of plugin_configs/SCHEMA.md; unknown keys inside them are the library's to refuse.
TABLES = ("model", "peak", "parallel", "logging", "sinks", "training")


def _toml_string(text: str) -> str:
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_value(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            raise ConfigError(f"key '{key}': {number} is not a finite number")
        return repr(number)
    if isinstance(value, (str, os.PathLike)):
        return _toml_string(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(f"{key}[{i}]", v) for i, v in enumerate(value)) + "]"
    raise ConfigError(f"key '{key}': a {type(value).__name__} is not a TOML value (give a str, number, bool or list)")


def plugin_toml(tables: Mapping[str, Any]) -> str:
    """The plugin TOML text of `tables` ({"model": {...}, "peak": {...}, ...}).

    ``model`` may be a string (a shipped name or a path: ``[model] config``) or a table; a bare shipped name in
    ``model.config`` is resolved to the shipped file, a relative path against the working directory.
    """
    lines = []
    for table in tables:
        if table not in TABLES:
            raise ConfigError(f"key '{table}': not a table of the plugin config (tables: {', '.join(TABLES)})")
    for table in TABLES:
        if table not in tables or tables[table] is None:
            continue
        content = tables[table]
        if table == "model" and isinstance(content, (str, os.PathLike)):
            content = {"config": content}
        if not isinstance(content, Mapping):
            raise ConfigError(f"key '{table}': must be a table (a dict), got {type(content).__name__}")
        content = dict(content)
        if table == "model" and isinstance(content.get("config"), (str, os.PathLike)):
            content["config"] = os.path.abspath(resolve_model(content["config"]))
        lines.append(f"[{table}]")
        for key, value in content.items():
            if not isinstance(key, str):
                raise ConfigError(f"key '{table}.{key!r}': keys must be strings")
            lines.append(f"{_toml_string(key)} = {_toml_value(f'{table}.{key}', value)}")
        lines.append("")
    return "\n".join(lines)


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


def code_error(message: str, source: str) -> str:
    """A library message about configuration given in code, without the line:col of the TOML text it was written
    as (text the user never saw): ``Meter(...):5:8: key 'parallel.tp': ...`` reads ``key 'parallel.tp': ...``."""
    return re.sub(re.escape(source) + r":\d+:\d+: ", "", message)
