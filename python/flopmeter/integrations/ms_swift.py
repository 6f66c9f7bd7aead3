"""flopmeter in ms-swift, as the external plugin its documentation describes: ms-swift imports each file given to
``--external_plugins`` before it builds the trainer, and passes the callbacks in ``swift.plugin.extra_callbacks``
to it. Importing this file appends a ``FlopmeterTrainerCallback`` there (once), so

    swift sft ... --external_plugins "$(python -m flopmeter.integrations.ms_swift)"

meters the run (``python -m flopmeter.integrations.ms_swift`` prints this file's path). Options: the environment
variable ``FLOPMETER_OPTIONS``, a JSON object of ``flopmeter.Meter``'s keyword arguments
(``{"peak": {"gpu": "H100 SXM"}}``); a value that is not one is refused with its text.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

__all__ = ["register", "options_from_environment"]


def options_from_environment() -> Dict[str, Any]:
    """``FLOPMETER_OPTIONS`` as a dict (empty when unset). Raises ValueError naming the variable otherwise."""
    text = os.environ.get("FLOPMETER_OPTIONS", "").strip()
    if not text:
        return {}
    try:
        options = json.loads(text)
    except ValueError as e:
        raise ValueError(f"FLOPMETER_OPTIONS must be a JSON object of Meter keyword arguments: {e} "
                         f"(got {text[:80]!r})") from None
    if not isinstance(options, dict):
        raise ValueError(f"FLOPMETER_OPTIONS must be a JSON object, got {type(options).__name__} ({text[:80]!r})")
    return options


def register(callbacks: Any = None) -> Any:
    """Appends one ``FlopmeterTrainerCallback`` to `callbacks` (default: ms-swift's ``extra_callbacks``) unless
    one is there; returns the callback that is there."""
    from .hf_callback import FlopmeterTrainerCallback

    if callbacks is None:
        from swift.plugin import extra_callbacks as callbacks
    for callback in callbacks:
        if isinstance(callback, FlopmeterTrainerCallback):
            return callback
    callback = FlopmeterTrainerCallback(**options_from_environment())
    callbacks.append(callback)
    return callback


if __name__ == "__main__":
    print(os.path.abspath(__file__))
else:
    try:
        import swift.plugin  # noqa: F401 - only inside ms-swift does importing this file register the callback
    except ImportError:
        pass
    else:
        register()
