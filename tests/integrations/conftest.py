"""Shared pieces of the integration suite: PyPI's torch 2.x with transformers, TRL, PEFT and pytorch-lightning,
in the venv scripts/test_integrations.sh makes (build/venv-integrations). Everything runs on the CPU, with tiny
models built from configs (nothing is fetched from the hub)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")


def run_torchrun(script: Path, args: List[str], nproc: int, tmp_path: Path, timeout: float = 420,
                 env: Optional[Dict[str, str]] = None) -> List[str]:
    """Runs `script` under torchrun with `nproc` CPU processes (Gloo), `env` added to the environment; returns
    each rank's output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE), **(env or {})}
    logs = tmp_path / "torchrun"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port",
           str(29500 + os.getpid() % 1000), "--log_dir", str(logs), "--redirects", "3", str(script), *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    outputs = []
    for rank in range(nproc):
        found = sorted(logs.rglob(f"attempt_0/{rank}/std*.log"))
        outputs.append("\n".join(p.read_text() for p in found))
    assert done.returncode == 0, f"torchrun failed ({done.returncode}):\n{done.stdout}\n{done.stderr}\n" + \
        "\n".join(f"--- rank {r} ---\n{o}" for r, o in enumerate(outputs))
    return outputs


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
