#!/usr/bin/env python3
"""The floors of the library, and that every #include goes down or sideways, never up.

Floors, from the ground up (README.md, "Layout"). The model layers form a small tree, each floor naming the
floors directly below it (BELOW); the layers above them are a chain:
    util                       printable text, UTF-8, the exact-double limit: no flopmeter header
    hardware -> util           peak table, device names, parallel layout
    arch     -> util           architecture, GEMM walk, terms, regimes, Megatron
    count    -> arch           batch counts, positions scan, count fields and plan, exact totals
    families -> arch           one file per model family, the spec rules and the field_reader they read through
    config   -> families       TOML and JSON readers, config files, the model loaders
    output -> accounting -> comm -> tensor -> abi -> tools    (output sits on config, count and hardware)
A file may include files of its own floor and of every floor its floor reaches through BELOW. The public
headers in include/flopmeter/ belong to the floor that implements them (PUBLIC below); python/ sits over abi
(it reaches the library only through the C ABI, checked by the Python tests, not here).

Usage: scripts/check_layers.py [--root DIR]     exit 0 when no include goes up; otherwise each one is printed
as file:line: floor A includes header of floor B.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# Each floor and the floors directly below it; a floor reaches every floor below those too.
BELOW = {
    "util": [],
    "hardware": ["util"],
    "arch": ["util"],
    "count": ["arch"],
    "families": ["arch"],
    "config": ["families"],
    "output": ["config", "count", "hardware"],
    "accounting": ["output"],
    "comm": ["accounting"],
    "tensor": ["comm"],
    "abi": ["tensor"],
    "tools": ["abi"],
}
FLOORS = list(BELOW)
# Public headers, by the floor whose code they describe. A header missing here is an error: a new public
# header must be given its floor.
PUBLIC = {
    "array_view.h": "util", "error.h": "util", "export.h": "util",
    "flop_model.h": "arch", "megatron.h": "arch", "model_spec.h": "arch",
    "layout.h": "hardware", "peak_table.h": "hardware",
    "model_config.h": "config",
    "metric_names.h": "output", "sinks.h": "output", "tensorboard.h": "output",
    "events.h": "accounting", "hooks.h": "accounting", "throughput.h": "accounting",
    # The communicator interface is the accounting floor's: the per-log protocol needs one collective; comm/
    # implements it (c10d, NCCL, Gloo from the environment, the C ABI's callbacks).
    "communicator.h": "accounting",
    "c10d.h": "comm", "gloo_env.h": "comm", "nccl.h": "comm",
    "torch.h": "tensor",
    "c_api.h": "abi", "c_api_config.h": "abi", "c_api_model.h": "abi",
    "c_api_values.h": "abi", "c_api_collectives.h": "abi",
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def reach(floor: str) -> set:
    """The floors `floor` may include: itself and every floor below it."""
    seen = {floor}
    for lower in BELOW[floor]:
        seen |= reach(lower)
    return seen


def floor_of_header(name: str, including: Path, root: Path):
    """The floor of an included header, or None for one outside the floors (a generated .pb.h, a local file)."""
    if name.startswith("flopmeter/"):
        return PUBLIC.get(name[len("flopmeter/"):], "unknown public header")
    first = name.split("/", 1)[0]
    if first in FLOORS:
        return first
    # A header next to the including file ("cli.h" in tools/): the including file's own floor.
    if (including.parent / name).exists():
        return floor_of_file(including.parent / name, root)
    return None


def floor_of_file(path: Path, root: Path):
    rel = path.relative_to(root).parts
    if rel[0] == "plugin" and len(rel) > 2 and rel[1] in FLOORS:
        return rel[1]
    if rel[0] == "tools":
        return "tools"
    if rel[0] == "include":
        return PUBLIC.get(rel[-1], "unknown public header")
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    root = Path(parser.parse_args().root).resolve()
    files = [p for d in ("plugin", "tools", "include/flopmeter") for p in sorted((root / d).rglob("*"))
             if p.suffix in (".h", ".cpp", ".cu", ".in")]
    problems = []
    for path in files:
        floor = floor_of_file(path, root)
        if floor == "unknown public header":
            problems.append(f"{path.relative_to(root)}: a public header with no floor (add it to PUBLIC in "
                            f"scripts/check_layers.py)")
            continue
        if floor is None:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = floor_of_header(m.group(1), path, root)
            if target is None:
                continue
            if target == "unknown public header":
                problems.append(f"{path.relative_to(root)}:{number}: includes {m.group(1)}, a public header with "
                                f"no floor (add it to PUBLIC in scripts/check_layers.py)")
            elif target not in reach(floor):
                problems.append(f"{path.relative_to(root)}:{number}: floor {floor} includes {m.group(1)} of floor "
                                f"{target}, not below it")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} include(s) against the floors (BELOW in scripts/check_layers.py)")
        return 1
    print(f"check_layers: {len(files)} files, every include goes down or sideways: "
          + ", ".join(f"{floor} -> {'/'.join(lower)}" for floor, lower in BELOW.items() if lower))
    return 0


if __name__ == "__main__":
    sys.exit(main())
