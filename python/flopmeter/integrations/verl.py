"""flopmeter as verl's FLOP counter, with no user code: a ``verl.plugins`` entry point (pyproject.toml).

verl imports every package registered under the ``verl.plugins`` entry-point group when ``verl`` itself is
imported (``VERL_USE_EXTERNAL_PLUGINS``, default ``auto``), in every process: the driver and each Ray worker.
Importing this module there replaces two methods of ``verl.utils.flops_counter.FlopsCounter``, the object
whose ``estimate_flops(batch_seqlens, delta_time, images_seqlens=...)`` every verl worker turns into
``perf/mfu/actor`` (and the critic's, the reference's): ``estimated / promised / world size``.

- ``__init__(config)``: as verl's, plus flopmeter's FLOP model of the Hugging Face config
  (``FlopModel(config.to_dict())``): every model type flopmeter knows, including those verl bills at 0.
- ``estimate_flops``: the exact FLOPs of what verl passes, divided by ``delta_time`` and 1e12 (verl's unit,
  TFLOP/s), beside verl's own device peak. ``batch_seqlens`` are the sequences' real token counts, each one
  document (its attention windows, chunks and linear-attention layers billed per document);
  ``images_seqlens`` are an image's or video frame's patches (``h x w``, one entry per frame), each billed as a
  ``[1, merge, patches / merge]`` grid. What verl does not pass, flopmeter cannot bill: padding (with
  ``use_remove_padding`` off, padded slots run but are not counted) and the height and width of each frame
  (exact for towers whose attention spans the whole frame: Qwen2-VL, Qwen3-VL; a windowed tower, Qwen2.5-VL's,
  is billed as that grid's windows). One warning says so the first time it applies; METRICS.md, "verl".
- A config flopmeter has no model for keeps verl's own estimate (one warning naming the model type), and so
  does any failure (one warning): the run never stops for flopmeter.

``install()`` does the replacement (idempotent; False without verl); ``uninstall()`` restores verl's methods.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Iterable, List, Optional

LOG = logging.getLogger("flopmeter")
__all__ = ["install", "uninstall", "exact_flops"]
_warned: set = set()


def _warn_once(key: str, message: str, *args: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        LOG.warning(message, *args)


def _ints(values: Any) -> List[int]:
    if hasattr(values, "tolist"):
        values = values.tolist()
    return [int(v) for v in values]


def exact_flops(model: Any, batch_seqlens: Iterable[Any], images_seqlens: Optional[Iterable[Any]] = None) -> int:
    """The exact training FLOPs by `model` (a ``flopmeter.FlopModel``) of documents of `batch_seqlens` tokens
    and frames of `images_seqlens` patches each (the module docstring)."""
    lengths = [n for n in _ints(batch_seqlens) if n > 0]
    grids = None
    if images_seqlens is not None:
        patches = [n for n in _ints(images_seqlens) if n > 0]
        if patches:
            coefficients = model.coefficients
            merge = max(1, int((coefficients.get("vision_geometry") or {}).get("spatial_merge_size", 1) or 1))
            grids = [[1, merge, n // merge] if n % (merge * merge) == 0 else [1, 1, n] for n in patches]
            if coefficients.get("vision_window_attn_pair"):
                _warn_once("vision windows", "flopmeter (verl): verl passes each frame's patch count, not its height "
                           "and width; the vision tower's windows are billed on a [1, %d, patches / %d] grid",
                           merge, merge)
    return int(model.flops(document_lengths=lengths, grid_thw=grids))


def _flop_model(config: Any) -> Optional[Any]:
    from ..model import FlopModel

    try:
        return FlopModel(config.to_dict())
    except Exception as e:  # noqa: BLE001 - a model flopmeter does not know keeps verl's estimate
        _warn_once(f"model {getattr(config, 'model_type', '?')}",
                   "flopmeter (verl): no FLOP model for model_type %r (%s); verl's own estimate is kept",
                   getattr(config, "model_type", None), e)
        return None


def install() -> bool:
    """Replaces ``FlopsCounter.__init__`` and ``estimate_flops`` with flopmeter's; False when verl is absent."""
    try:
        from verl.utils import flops_counter as module
    except ImportError:
        return False
    cls = module.FlopsCounter
    if getattr(cls, "_flopmeter_original", None) is not None:
        return True
    original_init, original_estimate = cls.__init__, cls.estimate_flops

    @functools.wraps(original_init)
    def __init__(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, config, *args, **kwargs)
        self.flopmeter_model = _flop_model(config)

    @functools.wraps(original_estimate)
    def estimate_flops(self: Any, batch_seqlens: Any, delta_time: float, **kwargs: Any) -> Any:
        model = getattr(self, "flopmeter_model", None)
        if model is not None and delta_time > 0:
            try:
                flops = exact_flops(model, batch_seqlens, kwargs.get("images_seqlens"))
                return flops / delta_time / 1e12, module.get_device_flops()
            except Exception as e:  # noqa: BLE001
                _warn_once("estimate", "flopmeter (verl): the exact count failed (%s: %s); verl's own estimate "
                           "is used", type(e).__name__, e)
        return original_estimate(self, batch_seqlens, delta_time, **kwargs)

    cls._flopmeter_original = (original_init, original_estimate)
    cls.__init__ = __init__
    cls.estimate_flops = estimate_flops
    return True


def uninstall() -> None:
    """Restores verl's own ``FlopsCounter`` methods (nothing when not installed)."""
    try:
        from verl.utils import flops_counter as module
    except ImportError:
        return
    cls = module.FlopsCounter
    original = getattr(cls, "_flopmeter_original", None)
    if original is not None:
        cls.__init__, cls.estimate_flops = original
        cls._flopmeter_original = None


try:  # the entry point: imported by `import verl`, in every process
    install()
except Exception as _e:  # noqa: BLE001 - a plugin never stops verl from importing
    LOG.warning("flopmeter (verl): not installed as verl's FLOP counter (%s: %s)", type(_e).__name__, _e)
