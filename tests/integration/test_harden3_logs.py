"""``tunedeck logs`` on the demo host: nothing a server writes controls the terminal, and the
engine's own echo of ``--api-key`` never shows (issue "Hardening, round three", items 1 and 3)."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.integration.test_launch_sim import demo, sim_command  # noqa: F401 - the fixture
from tests.integration.test_launcher import free_port
from tests.waits import until, until_async
from tunedeck.hostops import launcher as L
from tunedeck.hostops.runstore import RunRecord, RunStore

pytestmark = pytest.mark.timeout(180)

#: what the server prints, written as Python escapes (a command line cannot carry the bytes)
HOSTILE_SRC = (
    r"INFO start\n"
    r"title\x1b]0;owned\x07 st\x1b]2;owned\x1b\\ dcs\x1bPq#0;2;0;0;0\x1b\\ clear\x1b[2J\x1b[H\x1b[5;5H"
    r" alt\x1b[?1049h reset\x1bc bell\x07 csi8\xc2\x9b2J \x1b[32mgreen\x1b[0m end\n"
    r"partial\x1b]0;last\x07"
)
_SGR = re.compile(rb"\x1b\[[0-9;:]*m")


def _cli(*args: str, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("NO_COLOR", None)
    return subprocess.run(
        [*tunedeck_cmd(), *args], cwd=REPO, env=env, stdout=stdout, stderr=subprocess.PIPE, timeout=120
    )


def _cli_on_a_terminal(*args: str) -> tuple[int, bytes, bytes]:
    """Run the CLI with its stdout on a pseudo-terminal; (rc, what the terminal got, stderr)."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("NO_COLOR", None)
    p = subprocess.Popen([*tunedeck_cmd(), *args], cwd=REPO, env=env, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    got = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the last writer is gone
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    assert p.stderr is not None
    err = p.stderr.read()
    return p.wait(timeout=60), bytes(got), err


async def _ended_run(host, argv: list[str]) -> RunRecord:  # type: ignore[no-untyped-def]
    rec = await L.launch(host, argv, engine="other")
    rc = Path(rec.run_dir or "", "rc")  # the demo host's run folders are on this machine
    await until_async(rc.exists, 60, what="the printing command ends")
    return rec


async def test_hostile_log_reaches_no_terminal_but_raw_keeps_the_exact_bytes(demo) -> None:
    rec = await _ended_run(demo, [sys.executable, "-c", f"import sys; sys.stdout.write('{HOSTILE_SRC}')"])
    raw_log = Path(rec.run_dir or "", "log").read_bytes()
    assert b"\x1b]0;owned\x07" in raw_log and b"\x1b[2J" in raw_log  # the server did send them

    for args in ((), ("--follow",), ("--json",)):
        r = await asyncio.to_thread(_cli, "logs", rec.run_id, "--demo", *args)
        assert r.returncode == 0, r.stderr
        out = r.stdout
        assert b"\x1b" not in out and b"\x07" not in out and "\x9b".encode() not in out, (args, out)
        assert b"owned" not in out and b"last" not in out and b"q#0" not in out
        if args != ("--json",):
            assert b"INFO start\n" in out and b"green end\n" in out and out.endswith(b"partial\n")

    # on a terminal the same lines, only SGR colour kept
    rc, shown, err = await asyncio.to_thread(_cli_on_a_terminal, "logs", rec.run_id, "--demo")
    assert rc == 0, err
    assert b"\x1b[32mgreen\x1b[0m" in shown
    assert b"\x1b" not in _SGR.sub(b"", shown) and b"\x07" not in shown and b"owned" not in shown

    # --raw: the exact bytes, to a pipe only
    r = await asyncio.to_thread(_cli, "logs", rec.run_id, "--demo", "--raw")
    assert r.returncode == 0 and r.stdout == raw_log
    rc, shown, err = await asyncio.to_thread(_cli_on_a_terminal, "logs", rec.run_id, "--demo", "--raw")
    assert rc != 0 and shown == b""
    assert err.decode().strip().count("\n") == 0 and "refused to a terminal" in err.decode()


@pytest.mark.parametrize("name,echo", [("vllm-baseline", "non-default args"), ("sglang-base", "server_args=")])
async def test_the_engines_echo_of_the_api_key_never_shows(demo, name: str, echo: str) -> None:
    secret = "sk-harden3-Zq8v0xR"
    argv, env, engine, port = sim_command(name, "--api-key", secret, "--sim-load-seconds", "1")
    rec = await L.launch(demo, argv, env, engine=engine, port=port, profile=name)
    log = Path(rec.run_dir or "", "log")

    def echoed() -> bool:
        return log.exists() and echo.encode() in log.read_bytes()

    await until_async(echoed, 60, what=f"the {engine} start-up echo of its arguments")
    assert secret.encode() in log.read_bytes()  # the engine did print it

    for args in ((), ("--json",)):
        r = await asyncio.to_thread(_cli, "logs", rec.run_id, "--demo", *args)
        assert r.returncode == 0, r.stderr
        assert secret.encode() not in r.stdout
        text = json.loads(r.stdout)["text"] if args else r.stdout.decode()
        (line,) = [ln for ln in text.splitlines() if echo in ln]
        assert "<redacted>" in line

    # the key sits in the run's folder for the clients, owner-only, and nowhere else there
    key_file = Path(rec.run_dir or "", "api_key")
    assert key_file.read_text().strip() == secret and key_file.stat().st_mode & 0o777 == 0o600
    assert json.loads(Path(rec.run_dir or "", "meta.json").read_text())["api_key"] is True
    assert secret not in Path(rec.run_dir or "", "argv.json").read_text()
    # a benchmark of the run sends its key (the server answers 401 without it) and completes
    r = await asyncio.to_thread(
        _cli, "bench", "--demo", "--port", str(port), "--concurrency", "2", "--num-prompts", "6",
        "--input-len", "16", "--output-len", "8", "--warmup", "0", "--ready-timeout", "90", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    summary = json.loads(r.stdout)  # one level: its summary
    assert summary["completed"] == 6 and summary["failed"] == 0, summary
    # nowhere else: records, results, journal, job specs (the engine's own log holds its echo)
    stored = (Path(os.environ["XDG_STATE_HOME"]).parent).rglob("*")
    leaks = [
        p for p in stored if p.is_file() and p.name not in ("api_key", "log") and secret.encode() in p.read_bytes()
    ]
    assert leaks == []
    await L.stop_run(demo, rec, grace=2, gpu_wait=5)


def _launch_cli(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [
            *tunedeck_cmd(),
            "launch",
            "--demo",
            "--json",
            "--engine",
            "other",
            "--port",
            str(port),
            "--cmd",
            "sleep",
            "300",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def test_two_launches_at_once_start_exactly_one_server(demo) -> None:
    """As reported: two `tunedeck launch` started together both passed the one-run check."""
    for trial in range(10):  # the figure: 10/10
        procs = [_launch_cli(free_port()) for _ in range(2)]
        done = [await asyncio.to_thread(p.communicate, timeout=120) for p in procs]
        codes = sorted(p.returncode for p in procs)
        assert codes[0] == 0 and codes[1] != 0, (trial, done)
        ok = next(out for p, (out, _) in zip(procs, done) if p.returncode == 0)
        first = json.loads(ok)["run_id"]
        refusal = next(err for p, (_, err) in zip(procs, done) if p.returncode != 0).decode()
        assert f"run {first}" in refusal, refusal  # the refusal names the run that started
        alive = [h for h in await L.list_host_runs(demo) if h.alive]
        assert [h.run_id for h in alive] == [first], (trial, alive)
        await L.stop_run(demo, RunStore().load(first) or RunRecord(first, "demo"), grace=2, gpu_wait=5)


async def test_the_run_view_shows_neither_sequences_nor_the_key(demo) -> None:
    """The run view's log widget (widgets/server_log.py) on a run that printed escape sequences
    and a start-up echo of its --api-key."""
    from textual.app import App

    from tunedeck.ui.screens.run import RunScreen
    from tunedeck.widgets.server_log import ServerLog

    src = HOSTILE_SRC + r"\nnon-default args: {'model': 'm', 'api_key': ['sk-view-77']}\n"
    rec = await _ended_run(demo, [sys.executable, "-c", f'import sys; sys.stdout.write("{src}")'])
    rec = RunStore().load(rec.run_id) or rec

    class A(App[None]):
        def on_mount(self) -> None:
            self.push_screen(RunScreen(demo, rec, tracker_options={"poll_gpu": False}))

    app = A()
    async with app.run_test(size=(120, 40)) as pilot:
        log = app.screen.query_one(ServerLog)
        await until_async(lambda: any("sk-" in ln or "<redacted>" in ln for ln in log.view.lines), 30, pilot=pilot)
        shown = [*log.ring, *log.view.lines, log.partial]
        assert not any("\x1b" in ln or "\x07" in ln or "\x9b" in ln for ln in shown), shown
        assert not any("owned" in ln or "sk-view-77" in ln for ln in shown), shown
        assert any("green end" in ln for ln in log.view.lines)


async def test_follow_resume_goes_on_after_the_last_line_printed(demo) -> None:
    """Lines are printed whole: a partial line held back at Ctrl-C is printed by the next --resume."""
    script = 'printf "a\\nb\\nhal"; sleep 10; printf "f\\nc\\n"; sleep 300'
    rec = await L.launch(demo, ["sh", "-c", script], engine="other")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen(
        [*tunedeck_cmd(), "logs", rec.run_id, "--demo", "--follow", "--resume"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None
    first = await asyncio.to_thread(p.stdout.read, 4)  # "a\nb\n": the partial "hal" is held back
    assert first == b"a\nb\n"
    p.send_signal(signal.SIGINT)
    await asyncio.to_thread(p.wait, 60)
    assert (RunStore().load(rec.run_id) or rec).log_offset == 4
    await until_async(lambda: Path(rec.run_dir or "", "log").read_bytes().endswith(b"c\n"), 30, what="the rest")
    r = await asyncio.to_thread(_cli, "logs", rec.run_id, "--demo", "--resume")
    assert r.returncode == 0 and r.stdout == b"half\nc\n", r


async def test_a_hostile_log_leaves_the_tmux_pane_title_alone(demo, tmp_path: Path) -> None:
    """The operator's real terminal: `tunedeck logs` of a log that sets the window title (OSC 0
    and 2), with 1 MB lines, run in a tmux pane; the pane's title is the one it had. The same log
    printed raw (`printf`) in another pane does change it: the check can fail."""
    import shutil

    if shutil.which("tmux") is None:
        msg = "tmux is not installed (apt-get install tmux)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    src = HOSTILE_SRC + r"\n{0}\x1b]2;owned-big\x07{0}\n"  # {0}: 1 MB of text around a title
    rec = await _ended_run(demo, [sys.executable, "-c", f"import sys; sys.stdout.write('{src}'.format('y' * 1048576))"])
    log = Path(rec.run_dir or "", "log")
    assert b"\x1b]2;owned-big\x07" in log.read_bytes() and log.stat().st_size > 2 * 1024 * 1024
    socks = iter(str(tmp_path / f"tmux{i}.sock") for i in range(9))  # a server of its own each time
    sock = ""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TMUX", None)

    def tmux(*args: str) -> str:
        r = subprocess.run(["tmux", "-S", sock, *args], capture_output=True, text=True, env=env, timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    def title_after(command: str) -> str:
        nonlocal sock
        sock = next(socks)
        tmux(
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "200",
            "-y",
            "50",
            "sleep 1; " + command + "; touch " + str(tmp_path / "done") + "; sleep 30",
        )
        try:
            tmux("select-pane", "-t", "t", "-T", "before")
            until((tmp_path / "done").exists, 90, what="the command in the pane ends")
            return tmux("display-message", "-p", "-t", "t", "#{pane_title}")
        finally:
            (tmp_path / "done").unlink(missing_ok=True)
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, env=env, timeout=30)

    cmd = " ".join([sys.executable, "-m", "tunedeck", "logs", rec.run_id, "--demo"])
    assert title_after(f"cd {REPO} && {cmd}") == "before"
    # the control: the same title sequence printed raw does reach the pane's title (a short
    # printf, not the 1 MB log: raw, that can take the tmux server down on a loaded machine)
    assert title_after(r"printf '\033]2;owned\007'") == "owned"
