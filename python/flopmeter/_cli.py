"""The bundled ``flopmeter`` command-line tool, and ``flopmeter.check()`` through it."""

from __future__ import annotations

import json
import os
import subprocess
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


def check(models: Optional[Iterable[Union[str, "os.PathLike[str]"]]] = None, *,
          seq_lens: Optional[Iterable[int]] = None) -> Dict[str, Any]:
    """The term-by-term check of the exact FLOP model against the Megatron per-token constant
    (``flopmeter check --json``) over the shipped configs, or the given models.

    Returns ``{"pass": bool, "reports": [...]}``, one report per (model, row length) with its rows, each row a
    term with ``exact``, ``megatron``, ``expected_ratio``, ``ratio`` and ``pass``. A model file that cannot be
    read raises ConfigError.
    """
    from .errors import ConfigError
    from .model import resolve_model

    args: List[str] = ["check", "--json"]
    for model in models or ():
        args.append(os.path.abspath(resolve_model(model)))
    for s in seq_lens or ():
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(f"seq_lens must hold ints >= 1, got {s!r}")
        args += ["--seq-len", str(s)]
    done = subprocess.run([str(executable()), *args], capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1) or not done.stdout.strip().startswith("["):
        raise ConfigError(done.stderr.strip() or f"flopmeter check exited with {done.returncode}")
    reports = json.loads(done.stdout)
    return {"pass": done.returncode == 0 and all(r["pass"] for r in reports), "reports": reports}
