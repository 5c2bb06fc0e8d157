"""The layers: the core runs without the UI, every package sits in one layer, and the
headless commands never load Textual or rich (checked on real runs, not on imports alone)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tomllib

from tests.conftest import REPO
from tests.simfix import SimProc, free_port

#: the packages (and top-level modules) of ``tunedeck`` that make up the core: everything but the UI
UI = {"ui"}
#: what only the dashboard may load: the UI libraries and the widgets
UI_ONLY = ("textual", "rich", "plotext", "tunedeck.widgets")


def _ui_only(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == u or m.startswith(u + ".") for u in UI_ONLY))


def _layers() -> list[list[str]]:
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = [c for c in cfg["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    assert len(contracts) == 1, "one layers contract covers every module"
    return [[m.strip() for m in re.split(r"[|:]", layer)] for layer in contracts[0]["layers"]]


def _top_level() -> set[str]:
    """``tunedeck.X`` for every package and module directly under ``tui/`` (but ``__init__``)."""
    out = set()
    for p in (REPO / "tui").iterdir():
        if p.name.startswith(("_", ".")) and p.name != "__main__.py":
            continue
        if p.is_dir() and (p / "__init__.py").exists():
            out.add(f"tunedeck.{p.name}")
        elif p.suffix == ".py":
            out.add(f"tunedeck.{p.stem}")
    return out


def test_every_package_sits_in_exactly_one_layer():
    names = [m for layer in _layers() for m in layer]
    assert len(names) == len(set(names)), "a package is in two layers"
    assert set(names) == _top_level() | {"tunedeck.widgets"}


def test_core_imports_no_textual():
    core = sorted(m for m in _top_level() if m.split(".")[1] not in UI)
    code = (
        "import importlib, pkgutil, sys\n"
        f"mods = []\n"
        f"for name in {core!r}:\n"
        "    if name == 'tunedeck.__main__':\n"
        "        continue\n"
        "    mod = importlib.import_module(name)\n"
        "    mods.append(name)\n"
        "    for m in pkgutil.walk_packages(getattr(mod, '__path__', []), name + '.'):\n"
        "        if m.name.endswith('.__main__'):\n"
        "            continue\n"
        "        importlib.import_module(m.name)\n"
        "        mods.append(m.name)\n"
        f"bad = [m for m in sys.modules if any(m == u or m.startswith(u + '.') for u in {UI_ONLY!r})]\n"
        "assert not bad, bad\n"
        "print(len(mods))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip()) > 80  # every core module, not a handful


def _imported(argv: list[str], env_extra: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``tunedeck ARGV`` with ``-X importtime`` and return the modules it loaded."""
    import os

    env = dict(os.environ, **(env_extra or {}))
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tunedeck", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    mods = set()
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            mods.add(line.rsplit("|", 1)[1].strip())
    return r, mods


def test_status_json_never_loads_textual_or_rich(tmp_path: Path):
    r, mods = _imported(["status", "--demo", "--json"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert '"gpus"' in r.stdout or '"gpu"' in r.stdout
    assert "tunedeck.cli" in mods  # the importtime log was read
    assert not _ui_only(mods), _ui_only(mods)


def test_a_real_benchmark_never_loads_textual_or_rich(tmp_path: Path):
    port = free_port()
    with SimProc("vllm", "m", "-tp", "8", "--port", str(port), "--sim-load-seconds", "0.2") as sim:
        sim.wait_ready()
        r, mods = _imported(
            [
                "bench",
                "--url",
                f"http://127.0.0.1:{port}",
                "--num-prompts",
                "4",
                "--concurrency",
                "2",
                "--input-len",
                "8",
                "--output-len",
                "4",
                "--json",
                "-",
            ],
        )
    assert r.returncode == 0, r.stderr[-2000:]
    assert '"completed": 4' in r.stdout
    assert not _ui_only(mods), _ui_only(mods)


def test_cli_help_and_version():
    r = subprocess.run([sys.executable, "-m", "tunedeck", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("tunedeck ")
    r = subprocess.run([sys.executable, "-m", "tunedeck", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--demo" in r.stdout and "--host" in r.stdout
