"""The bundled ``flopmeter`` command-line tool, and ``flopmeter.check()``: the tool's check, through the C ABI."""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from . import _native


def executable() -> Path:
    """The CLI installed with the package ($FLOPMETER_CLI overrides it, for a build tree)."""
    override = os.environ.get("FLOPMETER_CLI")
    if override:
        return Path(override)
    path = _native.PACKAGE_DIR / "_bin" / "flopmeter"
    if not path.is_file():
        raise FileNotFoundError(f"flopmeter: the command-line tool is not installed at {path}")
    return path


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m flopmeter ARGS`` and the ``flopmeter`` script: runs the tool with ARGS, exits with its code."""
    args = list(sys.argv[1:] if argv is None else argv)
    tool = str(executable())
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(tool, [tool, *args])


# The row lengths `flopmeter check` takes when none is given.
DEFAULT_SEQ_LENS = (4096, 8192, 32768)


def check(models: Optional[Iterable[Union[str, "os.PathLike[str]"]]] = None, *,
          seq_lens: Optional[Iterable[int]] = None) -> Dict[str, Any]:
    """The term-by-term check of the exact FLOP model against the Megatron per-token constant (what
    ``flopmeter check --json`` prints) over the shipped configs, or the given models (paths or shipped names), at
    each row length of ``seq_lens`` (default 4096, 8192 and 32768). In this process, through the C ABI
    (flopmeter_model_check_json).

    Returns ``{"pass": bool, "reports": [...]}``, one report per (model, row length) with its rows, each row a
    term with ``exact``, ``megatron``, ``expected_ratio``, ``ratio`` and ``pass``. A model file that cannot be
    read raises ConfigError; a row length the check cannot take (< 1, or too large for a 64-bit pair count)
    ValueError naming ``seq_lens``.
    """
    from .model import FlopModel, model_configs_dir, resolve_model

    lengths: List[int] = []
    for s in seq_lens or ():
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(f"seq_lens must hold ints >= 1, got {s!r}")
        lengths.append(s)
    lengths = lengths or list(DEFAULT_SEQ_LENS)
    given = list(models or ())
    # As the tool: the given models in their order, else every *.toml of the configs directory by file name.
    paths = [resolve_model(m) for m in given] if given else \
        [str(p) for p in sorted(model_configs_dir().glob("*.toml"), key=lambda p: p.name)]
    loaded = [FlopModel(path) for path in paths]  # every model first: a bad file fails before any check runs
    lib = _native.lib()
    reports = []
    for model in loaded:
        for seq_len in lengths:
            error = _native.error_buffer()
            needed = lib.flopmeter_model_check_json(model._handle, seq_len, None, 0, error, len(error))
            if needed < 0:
                raise ValueError(f"seq_lens: check of {model.name} at S={seq_len}: "
                                 f"{error.value.decode('utf-8', 'replace') or _native.status_string(int(needed))}")
            text = ctypes.create_string_buffer(int(needed) + 1)
            lib.flopmeter_model_check_json(model._handle, seq_len, text, len(text), None, 0)
            reports.append(json.loads(text.value.decode("utf-8")))
    return {"pass": all(r["pass"] for r in reports), "reports": reports}
