"""What trains, read from a torch model: the ``[training]`` table (frozen parts, LoRA rank and targets) and the
activation checkpointing, for the integrations.

Parts, by parameter name (Hugging Face's names for Qwen-VL and LLaVA-style models):
- ``merger``: a name with ``merger`` under the vision tower (``visual.merger``, ``visual.deepstack_merger_list``)
  or a ``multi_modal_projector``;
- ``vision``: the rest of the vision tower (``visual.``, ``vision_tower.``, ``vision_model.``);
- ``text``: everything else (decoder, embeddings, LM head).

A part is frozen when none of its parameters trains (``requires_grad``), trains when all do. A part of which some
parameters train and some do not is a regime flopmeter cannot bill exactly: it is billed as the majority of its
parameters (by count of weights) and named in one warning. LoRA (PEFT) adapters count as their rank and the
projection names they sit on; adapters outside the decoder, ranks that differ between modules, or projections
flopmeter does not bill are named in the warning too.

Thread-safety: pure functions of the model they read.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

LOG = logging.getLogger("flopmeter")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "in_proj_qkv",
                "in_proj_z", "out_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
_VISION_MARKERS = ("visual.", "vision_tower.", "vision_model.", "vision_encoder.")
_LORA_MARKERS = ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_magnitude_vector")


def unwrap(model: Any) -> Any:
    """The model under DDP/FSDP wrappers (``.module``) and PEFT (``get_base_model()``)."""
    seen = set()
    while id(model) not in seen:
        seen.add(id(model))
        if hasattr(model, "get_base_model") and hasattr(model, "peft_config"):
            model = model.get_base_model()
        elif type(model).__name__ in ("DistributedDataParallel", "DataParallel", "FullyShardedDataParallel") and \
                hasattr(model, "module"):
            model = model.module
    return model


def part_of(name: str) -> str:
    """``vision``, ``merger`` or ``text`` for a parameter name."""
    if "multi_modal_projector" in name:
        return "merger"
    if any(marker in name or name.startswith(marker) for marker in _VISION_MARKERS):
        return "merger" if "merger" in name else "vision"
    return "text"


def _peft_wrapper(model: Any) -> Optional[Any]:
    seen = set()
    while id(model) not in seen:
        seen.add(id(model))
        if hasattr(model, "peft_config") and hasattr(model, "get_base_model"):
            return model
        if hasattr(model, "module"):
            model = model.module
    return None


def _lora(model: Any, problems: List[str]) -> Tuple[int, List[str]]:
    """(rank, targets) of the LoRA adapters in `model`, or (0, []); what cannot be billed goes to `problems`."""
    peft = _peft_wrapper(model)
    if peft is None:
        return 0, []
    adapter = getattr(peft, "active_adapter", "default")
    if isinstance(adapter, (list, tuple)):
        adapter = adapter[0] if adapter else "default"
    config = peft.peft_config.get(adapter) if isinstance(peft.peft_config, dict) else None
    kind = str(getattr(config, "peft_type", ""))
    if config is not None and "LORA" not in kind.upper():
        problems.append(f"PEFT method {kind} (flopmeter bills LoRA adapters only; billed as a frozen decoder)")
    ranks: Dict[int, List[str]] = {}
    targets = set()
    for name, module in peft.named_modules():
        r = getattr(module, "r", None)
        if not isinstance(r, dict) or adapter not in r or not hasattr(module, "lora_A"):
            continue
        leaf = name.rsplit(".", 1)[-1]
        if part_of(name) != "text":
            problems.append(f"LoRA on {name} (the vision side: adapters there are not billed)")
            continue
        if leaf not in LORA_TARGETS:
            problems.append(f"LoRA on {name} ({leaf!r} is not a projection flopmeter bills: "
                            f"{', '.join(LORA_TARGETS)})")
            continue
        ranks.setdefault(int(r[adapter]), []).append(name)
        targets.add(leaf)
    if not ranks:
        return 0, []
    rank = max(ranks, key=lambda k: len(ranks[k]))
    for other, names in ranks.items():
        if other != rank:
            problems.append(f"LoRA rank {other} on {', '.join(names[:3])}{' ...' if len(names) > 3 else ''} "
                            f"(billed as rank {rank}, the rank of most adapters)")
    return rank, sorted(targets, key=LORA_TARGETS.index)


def training_table(model: Any) -> Tuple[Dict[str, Any], List[str]]:
    """(the ``[training]`` table for `model`, the problems to warn about)."""
    problems: List[str] = []
    rank, targets = _lora(model, problems)
    weights: Dict[str, Dict[bool, int]] = {}
    names: Dict[Tuple[str, bool], List[str]] = {}
    for name, parameter in model.named_parameters():
        if any(marker in name for marker in _LORA_MARKERS):
            continue
        part = part_of(name)
        trains = bool(parameter.requires_grad)
        weights.setdefault(part, {True: 0, False: 0})[trains] += int(parameter.numel())
        names.setdefault((part, trains), []).append(name)
    frozen = []
    for part in ("vision", "merger", "text"):
        counts = weights.get(part)
        if counts is None:
            continue
        if rank and part == "text":
            # LoRA freezes the decoder's base weights; any that still train cannot be billed with it.
            if counts[True]:
                listed = names[("text", True)]
                problems.append(f"{len(listed)} decoder parameters train beside the LoRA adapters "
                                f"({', '.join(listed[:3])}{' ...' if len(listed) > 3 else ''}): billed as frozen")
            continue
        billed_trains = counts[True] >= counts[False] if counts[True] and counts[False] else bool(counts[True])
        if counts[True] and counts[False]:
            odd = names[(part, not billed_trains)]
            problems.append(f"the {part} part is partly frozen: billed as {'training' if billed_trains else 'frozen'}, "
                            f"but {len(odd)} parameters {'do not train' if billed_trains else 'train'} "
                            f"({', '.join(odd[:3])}{' ...' if len(odd) > 3 else ''})")
        if not billed_trains:
            frozen.append(part)
    table: Dict[str, Any] = {}
    if frozen:
        table["frozen"] = frozen
    if rank:
        table["lora_rank"] = rank
        table["lora_targets"] = targets
    return table, problems


def warn_regime(problems: List[str]) -> None:
    """One warning naming every parameter group flopmeter cannot bill exactly."""
    if problems:
        LOG.warning("flopmeter cannot bill this training regime exactly; the FLOPs are off for: %s",
                    "; ".join(problems))


def gradient_checkpointing(model: Any) -> bool:
    """Whether the model recomputes activations in its backward (transformers' ``is_gradient_checkpointing``,
    ``is_activation_checkpointing`` in transformers 5.x)."""
    base = unwrap(model)
    for attribute in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        value = getattr(base, attribute, None)
        if isinstance(value, bool):
            return value
        if callable(value):
            try:
                return bool(value())
            except Exception:  # noqa: BLE001 - a model whose property misbehaves: no recompute known
                return False
    return False


def hf_config(module: Any) -> Optional[Dict[str, Any]]:
    """The Hugging Face config of `module` as a dict (``config.to_dict()``): of the model under its wrappers, else of
    its ``.model`` (a LightningModule that holds one); None when neither has a config with a ``model_type``."""
    base = unwrap(module)
    for owner in (base, getattr(base, "model", None)):
        config = getattr(owner, "config", None)
        if config is not None and hasattr(config, "to_dict") and getattr(config, "model_type", None):
            return config.to_dict()
    return None


def parallel_sizes(configs: List[Any], tp_size: Any = None) -> Dict[str, int]:
    """tp and cp of a job from accelerate-style parallelism configs (``tp_size``, ``cp_size``, ``sp_size``: context
    and sequence parallel ranks share one micro-batch alike) and a plain `tp_size`; 1 where nothing says more."""
    sizes = {"tp": 1, "cp": 1}
    for config in configs:
        if config is None:
            continue
        sizes["tp"] = max(sizes["tp"], int(getattr(config, "tp_size", 1) or 1))
        sizes["cp"] = max(sizes["cp"], int(getattr(config, "cp_size", 1) or 1) * int(getattr(config, "sp_size", 1) or 1))
    if isinstance(tp_size, int) and not isinstance(tp_size, bool) and tp_size > 1:
        sizes["tp"] = max(sizes["tp"], tp_size)
    return sizes


def model_options(module: Any, options: Dict[str, Any], *, caller: str, micro_batches_per_step: int = 1,
                  parallel: Optional[Dict[str, int]] = None, args: Any = None) -> Dict[str, Any]:
    """The Meter's keyword arguments for training `module`: `options` as given, the model from its Hugging Face
    config when `options` name none, and the rest learned (``learned_options``). A ``config`` given (a plugin
    TOML or tables) is taken as it is. Raises TypeError, naming `caller`, when there is no model to meter."""
    options = dict(options)
    if options.get("config") is not None:
        return options
    if options.get("model") is None:
        config = hf_config(module)
        if config is None:
            raise TypeError(f"{caller}: the model ({type(unwrap(module)).__name__}) has no Hugging Face config; "
                            "pass model=... (a shipped name, a config.json, a dict)")
        options["model"] = config
    return learned_options(options, module, micro_batches_per_step, parallel, args)


def make_meter(options: Dict[str, Any], cls: Any = None) -> Any:
    """``cls(**options)`` (``Meter`` by default); a ``model`` that is a Hugging Face config dict (it has
    ``model_type``) is handed to the library as the config.json it would be in a checkpoint."""
    import json
    import os
    import tempfile

    from ..meter import Meter

    cls = Meter if cls is None else cls
    model = options.get("model")
    if not (isinstance(model, dict) and "model_type" in model):
        return cls(**options)
    # The model is named after its directory: the checkpoint's name where the config has one, else its type.
    name = os.path.basename(str(model.get("_name_or_path") or "").rstrip("/")) or str(model["model_type"])
    name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).lstrip(".") or "model"
    with tempfile.TemporaryDirectory(prefix="flopmeter-") as directory:
        os.mkdir(os.path.join(directory, name))
        path = os.path.join(directory, name, "config.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(model, f, indent=1, default=str)
        return cls(**dict(options, model=path))


def learned_options(options: Dict[str, Any], model: Any, micro_batches_per_step: int,
                    parallel: Optional[Dict[str, int]] = None, args: Any = None) -> Dict[str, Any]:
    """`options` (a Meter's keyword arguments, the model already set) with what the integrations learn filled in
    where the user gave nothing: ``[training]`` from `model`'s parameters (one warning for what cannot be
    billed), the activation checkpointing (``recompute``), the ``[parallel]`` sizes above 1, ``gpu = "auto"``,
    ``tpi_multiplier``, and no console sink (the records go to the trainer's loggers)."""
    options = dict(options)
    training = dict(options.get("training") or {})
    if "frozen" not in options and not {"frozen", "lora_rank", "lora_targets"} & set(training):
        table, problems = training_table(model)
        warn_regime(problems)
        training.update(table)
    if training:
        options["training"] = training
    layout = dict(options.get("parallel") or {})
    for key, value in (parallel or {}).items():
        if value > 1:
            layout.setdefault(key, value)
    if layout:
        options["parallel"] = layout
    options["peak"] = dict({"gpu": "auto"}, **(options.get("peak") or {}))
    logging_table = dict(options.get("logging") or {})
    logging_table.setdefault("tpi_multiplier", float(max(1, int(micro_batches_per_step or 1))))
    options["logging"] = logging_table
    options["sinks"] = dict({"console": False}, **(options.get("sinks") or {}))
    if "recompute" not in options and "recompute" not in training:
        recompute = recompute_option(model, args)
        if recompute is not None:
            options["recompute"] = recompute
    return options


def recompute_option(model: Any, args: Any = None) -> Optional[Dict[str, Any]]:
    """``Meter(recompute=...)`` for the model's activation checkpointing, or None without any.

    Hugging Face checkpoints whole decoder layers (and the ViT blocks of a vision model) with
    ``torch.utils.checkpoint``: reentrant (``use_reentrant=True``) runs each layer's forward again whole
    (``"full"``); non-reentrant, transformers' default, stops before the layer's last GEMM (``"full_early_stop"``).
    On when the model checkpoints, or when the trainer's args will turn it on (``activation_checkpointing``,
    ``gradient_checkpointing``). The kind is read from the checkpoint function the model holds, else from the
    args; ``every_n_layers`` from the args."""
    # The Trainer turns it on in train(), after attach: its args say it will.
    from_args = any(getattr(args, name, False) is True for name in ("activation_checkpointing",
                                                                     "gradient_checkpointing"))
    if not (gradient_checkpointing(model) or from_args):
        return None
    base = unwrap(model)
    kwargs: Dict[str, Any] = {}
    for source in (getattr(args, "activation_checkpointing_kwargs", None),
                   getattr(args, "gradient_checkpointing_kwargs", None)):
        if isinstance(source, dict):
            kwargs.update(source)
    reentrant = kwargs.get("use_reentrant")
    vision = False
    for name, module in base.named_modules():
        function = getattr(module, "_gradient_checkpointing_func", None)
        keywords = getattr(function, "keywords", None)
        if isinstance(keywords, dict) and "use_reentrant" in keywords and reentrant is None:
            reentrant = keywords["use_reentrant"]
        # A module that checkpoints its blocks has the flag (set to True by the model's enable call).
        flag = getattr(module, "gradient_checkpointing", None)
        if isinstance(flag, bool) and (flag or from_args) and part_of(name + ".") != "text":
            vision = True
    option: Dict[str, Any] = {"policy": "full" if reentrant else "full_early_stop"}
    every = kwargs.get("every_n_layers", 1)
    if isinstance(every, int) and every > 1:
        option["every"] = every
    if vision:
        option["vision"] = True
    return option
