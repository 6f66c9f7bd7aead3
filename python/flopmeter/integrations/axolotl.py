"""flopmeter as an Axolotl plugin: in the run's YAML,

    plugins:
      - flopmeter.integrations.axolotl.FlopmeterPlugin
    flopmeter:                  # optional: flopmeter.Meter's keyword arguments
      peak: {gpu: H100 SXM}

Axolotl builds the Hugging Face trainer itself and then calls each plugin's ``post_trainer_create(cfg, trainer)``;
the plugin attaches to that trainer there (``attach``, in ``transformers.py``), with the ``flopmeter:`` mapping
as its options. Axolotl's multipack (sample packing) puts document ids into ``attention_mask`` (1, 1, 2, 2, 0)
and restarts ``position_ids`` per document; the one batch reader takes the documents from either.

The plugin is a subclass of Axolotl's ``BasePlugin`` where Axolotl is installed (its other hooks do nothing);
``get_input_args`` names the pydantic model that lets Axolotl's config validation accept the ``flopmeter:`` key.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from . import transformers as _attach

LOG = logging.getLogger("flopmeter")
__all__ = ["FlopmeterPlugin", "FlopmeterArgs", "plugin_options"]

try:
    from axolotl.integrations.base import BasePlugin as _Base
except ImportError:  # Axolotl absent: the class stands alone (tests, or a trainer that calls it by hand)
    _Base = object

try:
    from pydantic import BaseModel as _Model
except ImportError:
    _Model = None

if _Model is not None:
    class FlopmeterArgs(_Model):
        """The ``flopmeter:`` key of an Axolotl config: ``flopmeter.Meter``'s keyword arguments."""

        flopmeter: Optional[Dict[str, Any]] = None
else:
    FlopmeterArgs = None


def plugin_options(cfg: Any) -> Dict[str, Any]:
    """The ``flopmeter:`` mapping of an Axolotl config (a dict or an attribute-style config); {} when absent.
    Raises TypeError, naming the key, for a value that is not a mapping."""
    value = cfg.get("flopmeter") if hasattr(cfg, "get") else getattr(cfg, "flopmeter", None)
    if value is None:
        return {}
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if not isinstance(value, dict):
        raise TypeError(f"flopmeter: must be a mapping of Meter keyword arguments, got {type(value).__name__}")
    return dict(value)


class FlopmeterPlugin(_Base):
    """Attaches flopmeter to the trainer Axolotl creates (the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.meter: Any = None

    def get_input_args(self) -> Optional[str]:
        return "flopmeter.integrations.axolotl.FlopmeterArgs" if FlopmeterArgs is not None else None

    def post_trainer_create(self, cfg: Any, trainer: Any) -> None:
        if getattr(trainer, "_flopmeter_attachment", None) is not None:
            self.meter = trainer._flopmeter_attachment.meter
            return
        self.meter = _attach.attach(trainer, **plugin_options(cfg))

    def __getattr__(self, name: str) -> Any:
        # Without Axolotl's BasePlugin, any other hook Axolotl's plugin manager calls does nothing.
        if _Base is object and not name.startswith("_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)
