"""The core must run without the UI: importing it never loads Textual."""

import subprocess
import sys

CORE = [
    "tui.model",
    "tui.cli",
    "tui.services.hosts",
    "tui.util.safety",
    "tui.util.files",
]


def test_core_imports_no_textual():
    code = (
        "import importlib, pkgutil, sys\n"
        "import tui, tui.services, tui.collectors, tui.sim, tui.bench, tui.util, tui.commands\n"
        "mods = []\n"
        "for pkg in (tui.services, tui.collectors, tui.sim, tui.bench, tui.util, tui.commands):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        mods.append(m.name)\n"
        f"mods += {CORE!r} + ['tui.profiles'] if importlib.util.find_spec('tui.profiles') else {CORE!r}\n"
        "for m in mods:\n"
        "    importlib.import_module(m)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'widgets')]\n"
        "assert not bad, bad\n"
        "print(len(mods))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip()) >= len(CORE)


def test_cli_help_and_version():
    r = subprocess.run([sys.executable, "-m", "tui", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("tunedeck ")
    r = subprocess.run([sys.executable, "-m", "tui", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--demo" in r.stdout and "--host" in r.stdout
