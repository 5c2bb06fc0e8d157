"""The wheel: built from the checkout, it holds one import package, ``tunedeck`` (tui/ with widgets/
inside and the shipped profiles as data), and installed alone it runs, finds its profiles and builds
the host runtime from its own files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

#: what the build reads; copied, so the build's own folders (build/, *.egg-info) stay out of the checkout
SOURCES = ("pyproject.toml", "README.md", "MANIFEST.in", "tui", "widgets", "profiles")


def _tree(folder: Path, suffixes: tuple[str, ...] | None = None) -> set[str]:
    return {
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and (suffixes is None or p.suffix in suffixes)
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, src / name)
    # no build isolation: the test extra pins the setuptools that builds it, so nothing is downloaded
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    [whl] = (tmp / "dist").glob("tunedeck-*.whl")
    return whl


def test_the_wheel_holds_one_package_with_every_file(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names}
    dist_info = [t for t in tops if t.endswith(".dist-info")]
    assert tops - set(dist_info) == {"tunedeck"}, sorted(tops)
    pkg = {n.removeprefix("tunedeck/") for n in names if n.startswith("tunedeck/")}
    assert {f for f in _tree(REPO / "tui") if f.endswith((".py", ".tcss", ".txt"))} <= pkg
    assert {f"widgets/{f}" for f in _tree(REPO / "widgets", (".py",))} <= pkg
    assert {f"builtin_profiles/{f}" for f in _tree(REPO / "profiles")} <= pkg
    assert "ui/app.tcss" in pkg and "widgets/__init__.py" in pkg and "engine_flags/sglang-0.5.23.txt" in pkg
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "tunedeck = tunedeck.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_installed_wheel_runs_alone(wheel: Path, tmp_path: Path):
    """Installed into a folder of its own (the dependencies from this environment), nothing read from
    the checkout: it runs, lists its built-in profiles and builds the host runtime from its files."""
    site = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    # one import package (and the console script's bin/)
    assert {p.name for p in site.iterdir() if not p.name.endswith(".dist-info")} - {"bin"} == {"tunedeck"}
    # the folder first on sys.path: it wins over this environment's own (editable) install
    env = dict(os.environ, PYTHONPATH=str(site))

    def installed(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """This Python with the installed folder first, run away from the checkout."""
        return subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=timeout
        )

    code = (
        "import json, zipfile, tunedeck, tunedeck.widgets.gpu_table\n"
        "from tunedeck.profiles.store import builtin_root\n"
        "from tunedeck.services import runtime\n"
        "pyz = runtime.build(__import__('pathlib').Path(__import__('sys').argv[1])).path\n"
        "print(json.dumps({'pkg': tunedeck.__file__, 'widgets': tunedeck.widgets.gpu_table.__file__,\n"
        "    'profiles': str(builtin_root()), 'archive': sorted(zipfile.ZipFile(pyz).namelist())}))\n"
    )
    r = installed("-c", code, str(tmp_path / "lib"), timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout)
    assert got["pkg"] == str(site / "tunedeck" / "__init__.py")
    assert got["widgets"] == str(site / "tunedeck" / "widgets" / "gpu_table.py")
    assert got["profiles"] == str(site / "tunedeck" / "builtin_profiles")
    assert "tunedeck/hostside/__main__.py" in got["archive"] and "tunedeck/bench/runner.py" in got["archive"]
    assert "tunedeck/engine_flags/vllm-0.33.0.txt" in got["archive"]  # package data, shipped from the wheel too
    r = installed("-m", "tunedeck", "--version")
    assert r.returncode == 0 and r.stdout.startswith("tunedeck "), r.stderr[-2000:]
    r = installed("-m", "tunedeck", "profiles", "list", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert str(site / "tunedeck" / "builtin_profiles") in r.stdout
