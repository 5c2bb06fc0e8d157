"""The command line imports only what the command it runs needs."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tunedeck.cli import build_parser
from tunedeck.commands import COMMANDS


def _loaded_after(args: list[str]) -> set[str]:
    """The modules loaded by ``tunedeck ARGS`` (run in a fresh interpreter)."""
    code = (
        "import sys, json\n"
        "from tunedeck.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write('\\n' + json.dumps(sorted(sys.modules)))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    return set(json.loads(r.stderr.strip().splitlines()[-1]))


def test_every_command_registers_the_name_and_help_of_the_table():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    registered = {c.dest: c.help for c in sub._choices_actions}
    assert registered == {name: cmd.help for name, cmd in COMMANDS.items()}
    for name, p in sub.choices.items():
        assert p.get_default("func") is not None or p._subparsers is not None, name


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_import_no_command_and_no_event_loop(args: list[str]):
    loaded = _loaded_after(args)
    commands = {m for m in loaded if m.startswith("tunedeck.commands.")}
    assert commands == set(), commands
    heavy = {
        "asyncio",
        "asyncssh",
        "httpx",
        "textual",
        "psutil",
        "tunedeck.hostops",
        "tunedeck.bench",
        "tunedeck.profiles",
    }
    assert not heavy & loaded, heavy & loaded


def test_a_command_imports_its_module_and_no_other_command():
    loaded = _loaded_after(["parse-log", "--help"])
    commands = {m for m in loaded if m.startswith("tunedeck.commands.") and not m.startswith("tunedeck.commands._")}
    assert commands == {"tunedeck.commands.parse_log"}


def test_a_mistyped_command_is_refused_with_the_choices():
    r = subprocess.run(
        [sys.executable, "-m", "tunedeck", "stauts"], capture_output=True, text=True, cwd=REPO, timeout=60, check=False
    )
    assert r.returncode == 2
    assert "invalid choice: 'stauts'" in r.stderr and "'status'" in r.stderr


def test_a_benchmark_of_a_url_loads_no_deployment_log_parser_or_httpx():
    """``--deployment`` is the one bench that needs the deployment store, and with it the startup-log
    parser (~70 ms of a start); a bench of a URL or its preview loads neither."""
    loaded = _loaded_after(["bench", "--url", "http://127.0.0.1:9", "--num-prompts", "10", "--preview"])
    assert "tunedeck.commands.bench" in loaded
    assert not {m for m in loaded if m.startswith(("tunedeck.services.deploy", "tunedeck.logparse"))}
    assert "httpx" not in loaded  # the URL is checked as the benchmark's own client reads it


def test_a_command_that_logs_nothing_opens_no_log_file():
    """A command opens ``tunedeck.log`` at its first record (most log nothing); the dashboard opens
    it at once, before Textual holds stderr (tests/unit/test_logs_setup.py)."""
    loaded = _loaded_after(["bench", "--url", "http://127.0.0.1:9", "--num-prompts", "10", "--preview"])
    assert "logging.handlers" not in loaded
