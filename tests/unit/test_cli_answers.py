"""How the subcommands answer: the exit status and one line of ``launch --wait`` for each end of a
startup, a failure's one line, the tables with notes under their rows, ``--json`` before or after
an ACTION."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from tunedeck.cli import build_parser
from tunedeck.commands._cli import fail, noted_table
from tunedeck.commands.launch import _verdict
from tunedeck.model import StartupProgress


def _final(state: str, **kw: object) -> StartupProgress:
    return StartupProgress(run_id="r1", engine="sglang", state=state, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "timeout", "code", "line"),
    [
        ("ready", None, 0, None),
        ("starting", 5.0, 3, "tunedeck launch: run r1 not ready after 5 s (loading weights); it keeps running"),
        ("stalled", None, 4, "tunedeck launch: run r1 stalled: no log output; it keeps running (tunedeck stop r1"),
        ("stopped", None, 1, "tunedeck launch: run r1 stalled: no log output"),
        ("failed", None, 1, "tunedeck launch: run r1 failed: stalled: no log output"),
    ],
)
def test_launch_wait_answers_each_end_of_a_startup_with_its_status_and_one_line(
    capsys: pytest.CaptureFixture[str], state: str, timeout: float | None, code: int, line: str | None
) -> None:
    args = argparse.Namespace(json=False, timeout=timeout)
    final = _final(state, message="loading weights", diagnosis="stalled: no log output", proof="last \x1b]0;x\x07line")
    host = SimpleNamespace(target="local")
    rec = SimpleNamespace(run_id="r1")
    assert _verdict(args, host, rec, final, 2.5) == code  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    if line is None:
        assert out == "run r1 ready after 2.5 s\n" and err == ""
        return
    assert out == "" and err.startswith(line), err
    # the proving log line is host text: shown, never acted on by the terminal
    assert ("log: last \\x1b]0;x\\x07line" in err) == (state not in ("starting",)), err
    assert "\x1b" not in err


def test_launch_wait_with_json_prints_no_ready_line(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(json=True, timeout=None)
    assert _verdict(args, SimpleNamespace(target="demo"), SimpleNamespace(run_id="r1"), _final("ready"), 1.0) == 0  # type: ignore[arg-type]
    assert capsys.readouterr() == ("", "")


def test_a_failure_is_one_safe_line_with_its_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail("stop", "run x: \x1b[2Jgone\nnext", 5) == 5
    assert capsys.readouterr().err == "tunedeck stop: run x: \\x1b[2Jgone\\nnext\n"


def test_notes_stand_under_their_row_from_the_named_column() -> None:
    lines = noted_table(
        ("RUN", "STATUS", "PID"),
        [("abc", "failed", 12), ("d", "ready", 7)],
        [["CUDA \x1b[31merror", "advice: read it"], []],
        under="STATUS",
        right=(2,),
    )
    assert lines == [
        "RUN  STATUS  PID",
        "abc  failed   12",
        "     CUDA \\x1b[31merror",
        "     advice: read it",
        "d    ready     7",
    ]


@pytest.mark.parametrize("command", ["journal", "plans", "profiles"])
def test_json_is_taken_before_and_after_the_action(command: str) -> None:
    parser = build_parser(only={command})
    assert parser.parse_args([command, "--json", "list"]).json is True
    assert parser.parse_args([command, "list", "--json"]).json is True
    assert parser.parse_args([command, "list"]).json is False


@pytest.mark.parametrize("argv", [["--host=--", "status"], ["status", "--host=--"], ["--host=", "runs"]])
def test_a_host_option_without_a_host_is_a_usage_error_not_a_crash(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse hands ``--host=--`` over as an empty list: once a crash in the fleet check."""
    from tunedeck.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "tunedeck: error:" in err and "--host" in err and "Traceback" not in err
