"""flopmeter: exact tokens/s, TFLOP/s and MFU for vision-language training, from Python.

    import flopmeter
    m = flopmeter.FlopModel("qwen3_vl_2b")
    m.flops(cu_seqlens=[0, 100, 300], grid_thw=[[1, 4, 4]])   # exact, an int

    with flopmeter.Meter(model="qwen3_vl_2b", peak={"gpu": "H100 SXM"}) as meter:
        for step in ...:
            meter.on_microbatch(cu_seqlens=cu, grid_thw=thw, samples=n)
            record = meter.on_log(step)    # the previous interval's record, or None

    meter = flopmeter.watch(model, optimizer)   # any PyTorch loop, unchanged: exact FLOPs per micro-batch

The core is the C++ library, loaded without LibTorch: ``import flopmeter`` and the FLOP model need no torch;
``Meter`` uses torch only when the trainer has it (torch.distributed for the per-log collectives, torch ops
to count CUDA tensors where they are). See README.md, "From Python", and METRICS.md for what is counted.
"""

from __future__ import annotations

from ._cli import check
from .errors import ConfigError
from .meter import Meter
from .model import FlopModel, model_configs_dir, shipped_models
from .watch import watch

try:
    from importlib.metadata import version as _version

    __version__ = _version("flopmeter")
except Exception:  # noqa: BLE001 - not installed (a source tree on sys.path)
    __version__ = "0+unknown"

__all__ = ["ConfigError", "FlopModel", "Meter", "check", "model_configs_dir", "shipped_models", "watch", "__version__"]
