"""The demo host: this machine with the simulator's shims first on PATH.

``demo_host()`` returns a :class:`~tunedeck.hostops.localhost.LocalHost` whose
environment overlay puts ``<sim state>/bin`` first on ``PATH`` and sets
``TUNEDECK_SIM_STATE``. The shims there are small ``sh`` scripts:

- ``nvidia-smi`` → ``python -m tunedeck.sim.smi "$@"`` (simulated GPUs; the module alone, not the
  whole command line, since pollers start it once a second or more)
- ``tunedeck``   → ``python -m tunedeck "$@"``
- ``vllm``       → ``python -m tunedeck sim vllm "$@"`` (so ``vllm serve MODEL …`` works)
- ``sglang``     → ``python -m tunedeck sim sglang "$@"`` (so ``sglang serve …`` works)

Each runs the interpreter that runs tunedeck (``python``, ``sys.executable`` by default), which
finds the installed package from any directory. Everything is quoted with shlex.quote.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from tunedeck.hostops.localhost import LocalHost
from tunedeck.sim.gpus import state_root

#: shim name -> argv after ``python -m``
SHIMS: dict[str, tuple[str, ...]] = {
    "nvidia-smi": ("tunedeck.sim.smi",),
    "tunedeck": ("tunedeck",),
    "vllm": ("tunedeck", "sim", "vllm"),
    "sglang": ("tunedeck", "sim", "sglang"),
}


def sim_state_dir() -> Path:
    """``$TUNEDECK_SIM_STATE`` or ``<tunedeck state dir>/sim``."""
    return state_root()


def shim_dir(state: Path | None = None) -> Path:
    return (state or sim_state_dir()) / "bin"


def shim_text(args: tuple[str, ...], python: str) -> str:
    q = shlex.quote
    cmd = " ".join([q(python), "-m", *(q(a) for a in args), '"$@"'])
    return f"#!/bin/sh\n# tunedeck simulator shim (written by tunedeck.sim.demo.write_shims)\nexec {cmd}\n"


def write_shims(directory: str | os.PathLike[str], python: str = sys.executable) -> Path:
    """Write the executable shims into ``directory`` (created if needed); return it."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for name, args in SHIMS.items():
        text = shim_text(args, python)
        p = d / name
        try:
            if p.is_file() and p.read_text() == text and os.access(p, os.X_OK):
                continue
        except OSError:
            pass
        tmp = d / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, p)
    return d


def demo_env(state: Path | None = None, python: str = sys.executable) -> dict[str, str]:
    """The environment overlay of the demo host (writes the shims as a side effect)."""
    state = state or sim_state_dir()
    bindir = write_shims(shim_dir(state), python)
    path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    return {"PATH": f"{bindir}{os.pathsep}{path}", "TUNEDECK_SIM_STATE": str(state)}


def demo_host() -> LocalHost:
    """This machine with simulated GPUs and engines (``tunedeck --demo``)."""
    return LocalHost("demo", env_overlay=demo_env())
