"""The CLI's surface: every subcommand listed with a one-line help, `--help` works everywhere, and every
headless subcommand (all but the simulator, `sim`) accepts `--json`."""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.clifix import launch_fake, run_cli, start_cli
from tests.conftest import REPO
from tests.ports import free_port
from tunedeck.cli import build_parser

pytestmark = pytest.mark.timeout(120)

NOT_HEADLESS = {"sim"}  # the simulator speaks the engines' own CLIs


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse._SubParsersAction]:
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser, help) for every subcommand at every depth."""
    for action in _subparsers(parser):
        helps = {c.dest: c.help for c in action._choices_actions}
        for name, sub in action.choices.items():
            yield (*path, name), sub, helps.get(name)
            yield from _walk(sub, (*path, name))


ALL = list(_walk(build_parser()))
LEAVES = [(path, p) for path, p, _ in ALL if not _subparsers(p)]


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(REPO)}


def test_the_walk_sees_the_commands():
    names = {p[0] for p, _, _ in ALL}
    assert {"status", "launch", "logs", "stop", "runs", "bench", "results", "profiles", "preflight", "sim"} <= names
    assert ("profiles", "list") in {p for p, _ in LEAVES}


@pytest.mark.parametrize("path,help_", [(p, h) for p, _, h in ALL], ids=[" ".join(p) for p, _, _ in ALL])
def test_every_subcommand_has_a_one_line_help(path, help_):
    assert help_ and help_ is not argparse.SUPPRESS and "\n" not in help_, path


@pytest.mark.parametrize(
    "parent", [()] + sorted({p[:-1] for p, _, _ in ALL if len(p) > 1}), ids=lambda p: " ".join(p) or "tunedeck"
)
def test_help_lists_each_subcommand_on_one_line_at_80_columns(parent):
    r = run_cli(*parent, "--help", env=_env(), timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for path, _, help_ in ALL:
        if path[:-1] != parent:
            continue
        line = next((ln for ln in lines if ln.split()[:1] == [path[-1]]), None)
        assert line is not None, f"{path[-1]} missing from `{' '.join(parent)} --help`"
        assert line.split(None, 1)[1] == help_, f"help of {' '.join(path)} wraps at 80 columns: {line!r}"


@pytest.mark.parametrize("path", [p for p, _, _ in ALL], ids=[" ".join(p) for p, _, _ in ALL])
def test_every_subcommand_help_exits_0(path):
    r = run_cli(*path, "--help", env=_env(), timeout=30)
    assert r.returncode == 0, (path, r.stderr)
    assert not r.stderr and r.stdout.strip()
    if path[0] not in NOT_HEADLESS:  # `sim smi --help` answers like nvidia-smi does
        assert r.stdout.startswith("usage:"), r.stdout[:200]


@pytest.mark.parametrize(
    "path,parser",
    [lp for lp in LEAVES if lp[0][0] not in NOT_HEADLESS],
    ids=[" ".join(p) for p, _ in LEAVES if p[0] not in NOT_HEADLESS],
)
def test_every_headless_subcommand_accepts_json(path, parser):
    opts = {o for a in parser._actions for o in a.option_strings}
    assert "--json" in opts, f"tunedeck {' '.join(path)} has no --json"
    json_action = next(a for a in parser._actions if "--json" in a.option_strings)
    assert "accepted for symmetry" not in (json_action.help or ""), f"{' '.join(path)}: --json does nothing"


def _tails(path: str) -> list[int]:
    out = []
    for e in os.listdir("/proc"):
        try:
            cl = Path(f"/proc/{e}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cl[:1] == [b"tail"] and path.encode() in cl:
            out.append(int(e))
    return out


def test_logs_json_is_json():
    """`logs --json`: one object with the log text; `--follow --json`: one JSON object per log line;
    not found: a JSON error object on stdout too."""

    td = functools.partial(run_cli, timeout=60)
    r = td("logs", "nope", "--json")
    assert r.returncode == 1 and "not found" in r.stderr
    assert json.loads(r.stdout)["error"]["kind"] == "not-found"
    port = free_port()
    r = td(*launch_fake(port, 0.5))
    try:
        assert r.returncode == 0, r.stderr
        rid = json.loads(r.stdout)["run"]["run_id"]
        r = td("logs", "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["run_id"] == rid and out["target"] == "local" and out["offset"] == 0
        assert "The server is fired up and ready to roll!" in out["text"]
        # text: the lines as shown (redraws collapsed, made safe); end_offset: where the log read ended
        raw = Path(out["path"]).read_bytes()[: out["end_offset"]]
        assert len(raw) == out["end_offset"] and out["text"].count("\n") == raw.count(b"\n")
        assert out["path"].endswith(f"/{rid}/log")
        # --follow --json: JSON lines until interrupted
        p = start_cli("logs", rid[:6], "--follow", "--json")

        try:
            first = [json.loads(p.stdout.readline()) for _ in range(3)]
        finally:
            p.send_signal(signal.SIGINT)  # Ctrl+C: the command ends its `tail -F` on the host
            try:
                p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
        assert p.returncode in (0, 130)  # 130: "interrupted"
        assert not _tails(out["path"]), "the follower's tail outlived `logs --follow`"
        assert all(x["run_id"] == rid and isinstance(x["line"], str) and "\n" not in x["line"] for x in first)
        assert first[0]["offset"] == 0 and first[1]["offset"] == len(first[0]["line"].encode()) + 1
    finally:
        s = td("stop", "--yes", "--json", "--grace", "3")
    assert s.returncode == 0, s.stderr
