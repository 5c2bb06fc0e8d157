"""The simulator's entry in the host-side runtime (the archive's ``__main__`` routes to it).

    python3 tunedeck-host-<hash>.pyz sim sglang [SGLang launch flags] [--sim-* flags]
    python3 tunedeck-host-<hash>.pyz sim vllm [serve] MODEL [vLLM flags] [--sim-* flags]
    python3 tunedeck-host-<hash>.pyz sim ray-node -- ray start [ray start options] --block
    python3 tunedeck-host-<hash>.pyz smi [nvidia-smi options]

The same simulator as ``tunedeck sim …`` on the laptop, with nothing installed on the host.
The simulated GPUs' state is ``$TUNEDECK_SIM_STATE``, else ``${TUNEDECK_HOME}/sim`` (the
runtime's home, ``~/.tunedeck`` by default): one set of GPUs per host, shared by the sim
servers and ``smi``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENGINES = ("sglang", "vllm")

USAGE = (
    "usage: tunedeck-host sim {sglang,vllm} [ENGINE ARGS...] | tunedeck-host sim ray-node -- RAY start [OPTIONS...]"
    " | tunedeck-host smi [NVIDIA-SMI OPTIONS...]\n"
)


def default_state() -> Path:
    """``${TUNEDECK_HOME}/sim`` (the runtime's home, as the shipping script finds it)."""
    home = os.environ.get("TUNEDECK_HOME") or os.path.join(os.path.expanduser("~"), ".tunedeck")
    return Path(os.path.abspath(home)) / "sim"


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    os.environ.setdefault("TUNEDECK_SIM_STATE", str(default_state()))
    if argv[:1] == ["smi"]:
        from tunedeck.sim.smi import main as smi_main

        return smi_main(argv[1:], sys.stdout)
    if argv[:1] == ["sim"] and len(argv) >= 2 and argv[1] in ENGINES:
        from tunedeck.sim.engine import main as engine_main

        return engine_main(argv[1], argv[2:])
    if argv[:2] == ["sim", "ray-node"]:
        # a Ray node of a simulated vLLM-on-Ray deployment: the real `ray start`, and the Ray
        # workers the simulated vLLM places on this node's simulated GPUs
        from tunedeck.sim.raynode import main as ray_node_main

        return ray_node_main(argv[2:])
    what = " ".join(argv[:2]) or "nothing"
    sys.stderr.write(f"tunedeck-host: {what!r}: not a simulator command\n{USAGE}")
    return 2
