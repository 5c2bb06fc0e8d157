"""Pilot tests: the server log view, the startup progress widget and RunScreen."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from textual.app import App, ComposeResult

from tests.screenapp import ScreenApp
from tests.waits import until_async
from tunedeck.model import StartupProgress
from tunedeck.widgets.server_log import ServerLog
from tunedeck.widgets.severity_log import line_severity
from tunedeck.widgets.startup_progress import StartupProgressView

pytestmark = pytest.mark.timeout(60)


class LogApp(App[None]):
    def __init__(self, max_lines: int = 1000) -> None:
        super().__init__()
        self.max_lines = max_lines

    def compose(self) -> ComposeResult:
        yield ServerLog(max_lines=self.max_lines, id="log")

    def on_mount(self) -> None:
        self.query_one(ServerLog).focus()


def sample_lines(n: int, start: int = 0) -> list[str]:
    out = []
    for i in range(start, start + n):
        if i % 10 == 3:
            out.append(f"[2026-01-01 00:00:00] ERROR line {i} boom")
        elif i % 10 == 5:
            out.append(f"[2026-01-01 00:00:00] WARNING line {i}")
        else:
            out.append(f"[2026-01-01 00:00:00] line {i}")
    return out


async def test_ring_buffer_and_batches():
    app = LogApp(max_lines=500)
    async with app.run_test(size=(100, 30)) as pilot:
        log = app.query_one(ServerLog)
        t0 = time.monotonic()
        for k in range(20):  # 20 000 lines in bursts
            log.append_lines(sample_lines(1000, k * 1000))
            await pilot.pause(0.01)
        # a burst of more than a screenful a batch is written every BUSY_FLUSH_S
        await until_async(lambda: log.total_lines == 20000, 5, pilot=pilot, what=lambda: f"{log.total_lines}")
        assert time.monotonic() - t0 < 10
        assert len(log.ring) == 500 and log.view.line_count == 500
        assert log.total_lines == 20000
        assert log.view.lines[-1].endswith("line 19999")
        assert log.following and log.view.is_vertical_scroll_end
        assert "500 lines of 20000" in log.status_text


async def test_search_next_previous_and_filter():
    app = LogApp()
    async with app.run_test(size=(100, 30)) as pilot:
        log = app.query_one(ServerLog)
        log.append_lines(sample_lines(200))
        await pilot.pause(0.3)
        await pilot.press("slash")
        for ch in "boom":
            await pilot.press(ch)
        await pilot.press("enter")
        await pilot.pause()
        assert log.query_text == "boom"
        assert len(log.matches) == 20
        assert log.current_match_line == 3 and not log.following
        await pilot.press("n")
        assert log.current_match_line == 13
        await pilot.press("N")
        await pilot.press("N")
        assert log.current_match_line == 193  # wraps around
        assert "20/20 matches" in log.status_text
        # new matching lines extend the match list
        log.append_lines(["late boom"])
        await pilot.pause(0.3)
        assert len(log.matches) == 21
        # filter to matching lines and back
        await pilot.press("m")
        await pilot.pause()
        assert log.filtering and log.view.line_count == 21
        assert all("boom" in ln for ln in log.view.lines)
        log.append_lines(["no match here", "another boom"])
        await pilot.pause(0.3)
        assert log.view.line_count == 22
        await pilot.press("m")
        await pilot.pause()
        assert log.view.line_count == 203
        await pilot.press("escape")
        await pilot.pause()
        assert log.pattern is None and log.matches == []


async def test_follow_and_pause():
    app = LogApp()
    async with app.run_test(size=(100, 20)) as pilot:
        log = app.query_one(ServerLog)
        log.append_lines(sample_lines(100))
        await pilot.pause(0.3)
        assert log.view.is_vertical_scroll_end
        await pilot.press("f")
        assert not log.following and "paused" in log.status_text
        log.view.scroll_home(animate=False, immediate=True)
        log.append_lines(sample_lines(100, 100))
        # a burst of more than a screenful is written every 0.5 s
        await until_async(lambda: log.view.line_count == 200, 5, pilot=pilot, what="the second batch")
        assert log.view.scroll_y == 0 and log.view.line_count == 200  # lines arrive, view stays
        await pilot.press("f")
        await pilot.pause()
        assert log.following and log.view.is_vertical_scroll_end


def test_line_severity():
    assert line_severity("(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1] x") == "error"
    assert line_severity("RuntimeError: NCCL error: boom") == "error"
    assert line_severity("[2026-01-01 00:00:00] WARNING: slow") == "warning"
    assert line_severity("[2026-01-01 00:00:00] Load weight begin.") == "info"


async def test_a_line_is_drawn_the_same_without_a_search_as_the_full_highlighter_draws_it():
    """Without a search or a selection a line's segments are made straight away (a log at 1,000
    lines/s): they must be the ones Text + highlighter make, severity and node-tag colours alike."""
    import re

    from tunedeck.widgets.severity_log import SeverityLog

    app = LogApp()
    async with app.run_test(size=(100, 30)) as pilot:
        view = app.query_one(ServerLog).view
        assert isinstance(view, SeverityLog)
        view.highlighter.tag_styles = {"gpu-a": "cyan", "op@10.0.0.2:2222": "magenta"}  # type: ignore[attr-defined]
        lines = [
            *sample_lines(10),
            "[gpu-a] RuntimeError: CUDA out of memory",
            "[gpu-a:ray] WARNING: slow",
            "[op@10.0.0.2:2222] plain",
            "[unknown] ERROR x",
            "tab\there ünïcode 全角",
        ]
        view.write_lines(lines)
        await pilot.pause()
        style = view.rich_style

        def drawn(y: int) -> list[tuple[str, object]]:
            return [(seg.text, seg.style) for seg in view._render_line_strip(y, style)]

        fast = [drawn(y) for y in range(len(lines))]
        view.highlighter.pattern = re.compile("(?!x)x")  # type: ignore[attr-defined]  # matches nothing
        full = [drawn(y) for y in range(len(lines))]
        view.highlighter.pattern = None  # type: ignore[attr-defined]
        assert fast == full
        assert any(len(x) == 2 for x in fast)  # a tag of its own colour was drawn


class ProgressApp(App[None]):
    def compose(self) -> ComposeResult:
        yield StartupProgressView(id="p")


async def test_startup_progress_widget():
    app = ProgressApp()
    async with app.run_test(size=(80, 10)) as pilot:
        w = app.query_one(StartupProgressView)
        assert "no startup" in w.text
        w.update(
            StartupProgress(
                "abc",
                "sglang",
                "starting",
                "weight-loading",
                phase_n=14,
                phase_total=37,
                fraction=0.42,
                elapsed=62,
                eta=90,
                eta_source="history",
                gpu_memory=(12288.0, 12288.0),
                health="down",
            )
        )
        await pilot.pause()
        t = w.text
        assert "42%" in t and "loading weights 14/37" in t and "elapsed 1m02s" in t and "ETA 1m30s" in t
        assert "GPU 12.0 12.0 GiB" in t and "STALLED" not in t
        w.update(
            StartupProgress(
                "abc",
                "sglang",
                "failed",
                "graph-capture",
                phase_label="decode",
                phase_n=0,
                phase_total=1,
                fraction=0.8,
                elapsed=600,
                stalled=True,
                stalled_for=300,
                diagnosis="stalled: no log output for 5 min",
                proof="Capturing batches (bs=1 ...): 0%",
            )
        )
        await pilot.pause()
        t = w.text
        assert "capturing CUDA graphs (decode) 0/1" in t and "STALLED" in t and "5m00s" in t
        assert "✗ stalled" in t and "Capturing batches" in t
        w.update(
            StartupProgress(
                "abc",
                "sglang",
                "stalled",
                "graph-capture",
                phase_label="decode",
                phase_n=0,
                phase_total=1,
                fraction=0.8,
                elapsed=600,
                stalled=True,
                stalled_for=300,
                gpu_memory=(61440.0, 61440.0),
                diagnosis="stalled: no log output for 5 min (capturing 0/1); holds GPU 0: 60.0 GiB, GPU 1: 60.0 GiB",
                proof="Capturing batches (bs=1 ...): 0%",
            )
        )
        await pilot.pause()
        t = w.text
        assert "stalled (still running)" in t and "holds GPU 0: 60.0 GiB" in t and "✗" not in t
        assert "tunedeck stop" in t
        w.update(StartupProgress("abc", "vllm", "ready", "ready", fraction=1.0, elapsed=30))
        await pilot.pause()
        assert "100%" in w.text and "ready" in w.text and "ETA" not in w.text


async def test_run_screen_attaches_shows_progress_and_stops():
    from tests.integration.test_launcher import fake
    from tunedeck.hostops import launcher as L
    from tunedeck.hostops import runstore
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.ui.screens.run import RunScreen

    host = LocalHost()
    argv, port = fake("vllm", None, "--load-seconds", "1.5")
    rec = await L.launch(host, argv, engine="vllm", port=port)

    app = ScreenApp(RunScreen(host, rec, grace=5, tracker_options={"poll_gpu": False}))
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.2)
            screen = app.screen
            assert isinstance(screen, RunScreen)
            for _ in range(100):
                await pilot.pause(0.1)
                p = screen.query_one(StartupProgressView).progress
                if p is not None and p.state == "ready":
                    break
            assert p is not None and p.state == "ready", p
            log = screen.query_one(ServerLog)
            await pilot.pause(0.3)
            assert any("Application startup complete." in ln for ln in log.view.lines)
            # a progress bar's \r frames collapse to the last one
            assert any("8/8" in ln for ln in log.view.lines)
            assert not any("\r" in ln for ln in log.view.lines)
            await pilot.press("s")
            await pilot.pause()
            await pilot.press("y")
            for _ in range(100):
                await pilot.pause(0.1)
                if screen.stop_result is not None:
                    break
            assert screen.stop_result is not None and screen.stop_result.state == "stopped"
            # the header says what happened: stopped by you, not a red "exited rc 0"
            for _ in range(30):
                await pilot.pause(0.1)
                p = screen.query_one(StartupProgressView).progress
                if p is not None and p.state == "stopped":
                    break
            view = screen.query_one(StartupProgressView).text
            assert p.state == "stopped" and "stopped (by you)" in view, view
            assert "exited" not in view and "rc 0" not in view and "✗" not in view
            assert "stopped (by you)" in str(screen.query_one("#run-title").content)
            assert runstore.RunStore().load(rec.run_id).status == "stopped"
    finally:
        for run in await L.list_host_runs(host):
            if run.alive:
                await L.stop_run(host, runstore.RunStore().load(run.run_id), grace=1)
    assert runstore.RunStore().load(rec.run_id).status == "stopped"


async def test_run_screen_launches_then_attaches_or_shows_refusal():
    from tests.integration.test_launcher import fake
    from tunedeck.hostops import launcher as L
    from tunedeck.hostops import runstore
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.ui.screens.run import RunScreen

    host = LocalHost()
    argv, port = fake("sglang", None, "--load-seconds", "1")
    screens = [
        RunScreen.for_launch(
            host, argv, engine="sglang", port=port, profile="fake", tracker_options={"poll_gpu": False}
        ),
        RunScreen.for_launch(host, ["sleep", "1"], tracker_options={"poll_gpu": False}),
    ]

    app = ScreenApp(screens[0])
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            s = screens[0]
            for _ in range(100):
                await pilot.pause(0.1)
                p = s.query_one(StartupProgressView).progress
                if p is not None and p.state == "ready":
                    break
            assert p is not None and p.state == "ready" and s.record.pid
            assert s.record.run_id in str(s.query_one("#run-title").content)
            # launched from the dashboard: its startup is in the tuning journal, as from the CLI
            from tunedeck.ab.journal import Journal

            for _ in range(50):
                entries = [e for e in Journal().entries() if e.get("id") == s.record.run_id]
                if entries:
                    break
                await pilot.pause(0.1)
            assert entries and entries[0]["kind"] == "launch" and entries[0]["status"] == "ready"
            assert entries[0]["profile"] == "fake" and entries[0]["startup_s"] > 0
            # a second launch on the same host is refused and shown, nothing runs
            app.push_screen(screens[1])
            for _ in range(50):
                await pilot.pause(0.1)
                if screens[1].launch_error:
                    break
            assert screens[1].launch_error and s.record.run_id in screens[1].launch_error
            assert "not launched" in screens[1].query_one(StartupProgressView).text
    finally:
        for run in await L.list_host_runs(host):
            if run.alive:
                await L.stop_run(host, runstore.RunStore().load(run.run_id), grace=2)


async def test_run_screen_resumes_at_the_shown_offset(tmp_path, monkeypatch):
    """Close the view mid-log and open it again with resume: no line lost or shown twice. The earlier
    bytes reach the tracker in pieces (small here: lines and stanzas cut across reads and slices)."""
    import re as _re

    from tests.integration.test_launcher import fake
    from tunedeck.hostops import launcher as L
    from tunedeck.hostops import runstore
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.ui.screens import run as runscreen
    from tunedeck.ui.screens.run import RunScreen

    monkeypatch.setattr(runscreen, "CATCHUP_READ", 200)
    monkeypatch.setattr(runscreen, "CATCHUP_SLICE", 33)
    reads: list[tuple[int, int | None]] = []
    real_read = runscreen.read_log

    async def read_log(host, path, offset=0, limit=None):
        reads.append((offset, limit))
        return await real_read(host, path, offset, limit)

    monkeypatch.setattr(runscreen, "read_log", read_log)

    host = LocalHost()
    argv, port = fake("sglang", None, "--numbered", "300", "--load-seconds", "0.5")
    rec = await L.launch(host, argv, engine="sglang", port=port)
    shown: list[str] = []

    try:
        first = RunScreen(host, rec, tracker_options={"poll_gpu": False})
        async with ScreenApp(first).run_test(size=(120, 40)) as pilot:
            for _ in range(100):
                await pilot.pause(0.05)
                log = first.query_one(ServerLog)
                if sum(1 for ln in log.ring if ln.startswith("line ")) >= 60:
                    break
            first._stop.set()
            await pilot.pause(0.3)
            log.flush_now()
            shown += list(log.ring)
        saved = runstore.RunStore().load(rec.run_id).log_offset
        assert saved > 0
        again = runstore.RunStore().load(rec.run_id)
        second = RunScreen(host, again, resume=True, tracker_options={"poll_gpu": False})
        # the liveness probe starts once the earlier bytes are parsed: a process found dead
        # halfway through would have ended the parse there, its verdict taken from half a log
        reads_at_probe: list[int] = []
        real_probe = second.tracker.probe_loop

        async def probe_loop(stop):
            reads_at_probe.append(len(reads))
            await real_probe(stop)

        second.tracker.probe_loop = probe_loop  # type: ignore[method-assign]
        async with ScreenApp(second).run_test(size=(120, 40)) as pilot:
            for _ in range(150):
                await pilot.pause(0.1)
                log = second.query_one(ServerLog)
                log.flush_now()
                if any("ready to roll" in ln for ln in log.ring):
                    break
            shown2 = list(log.ring)
            assert shown2[0].startswith("── resumed at byte")
            # the tracker still knows the whole startup (parsed the earlier bytes)
            assert second.tracker.parser.state.weights == (8, 8)
            assert saved > 400 and [o for o, _ in reads] == list(range(0, saved, 200))
            assert reads_at_probe == [len(range(0, saved, 200))]
            shown += shown2[1:]
        nums = [int(m.group(1)) for ln in shown if (m := _re.fullmatch(r"line (\d+)", ln))]
        assert nums == list(range(1, 301))
    finally:
        for run in await L.list_host_runs(host):
            if run.alive:
                await L.stop_run(host, runstore.RunStore().load(run.run_id), grace=2)


async def test_startup_progress_hides_stale_health_after_ready():
    # a run made ready by its log line before /health answered: health is no longer
    # polled, so its last "down" must not be shown next to "ready"
    app = ProgressApp()
    async with app.run_test(size=(100, 10)) as pilot:
        w = app.query_one(StartupProgressView)
        w.update(StartupProgress("abc", "sglang", "starting", "weight-loading", fraction=0.4, health="down"))
        await pilot.pause()
        assert "health down" in w.text
        w.update(StartupProgress("abc", "sglang", "ready", "ready", fraction=1.0, elapsed=6, health="down"))
        await pilot.pause()
        assert "ready" in w.text and "health down" not in w.text
        w.update(StartupProgress("abc", "vllm", "ready", "ready", fraction=1.0, elapsed=6, health="ok"))
        await pilot.pause()
        assert "health ok" in w.text


def _run_screen_fed_by(monkeypatch: pytest.MonkeyPatch, follow: Any) -> Any:
    """The run view of a local SGLang run whose log the ``follow`` stand-in feeds (in place of
    ``follow_forever``: nothing is read from disk)."""
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.hostops.runstore import RunRecord
    from tunedeck.ui.screens import run as run_mod

    monkeypatch.setattr(run_mod, "follow_forever", follow)
    rec = RunRecord("0a1b2c3d", "local", ["python3", "-m", "sglang.launch_server"], engine="sglang", run_dir="/r")
    return run_mod.RunScreen(LocalHost(), rec, tracker_options={"poll_gpu": False})


async def test_the_run_view_redacts_and_sanitises_each_line_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The view and the startup tracker read one pipeline: a line is split, decoded, redacted and
    made safe once (it was twice: once for the view, once for the tracker's parser)."""
    from tests.unit.test_tracker_lines import SERVING, count_cleaning

    calls = count_cleaning(monkeypatch)
    counted: dict[str, int] = {}

    async def follow(host, path, offset, on_chunk, stop, **kw):  # type: ignore[no-untyped-def]
        before = dict(calls)
        for _ in range(10):
            on_chunk(SERVING.encode() * 50)  # 100 lines a chunk
        counted.update({k: calls[k] - before[k] for k in calls})
        await stop.wait()
        return offset

    screen = _run_screen_fed_by(monkeypatch, follow)
    async with ScreenApp(screen).run_test(size=(120, 40)) as pilot:
        log = screen.query_one(ServerLog)
        await until_async(lambda: log.total_lines == 1000, 10, pilot=pilot, what=lambda: f"{log.total_lines} lines")
        assert counted == {"redact": 1000, "safe": 1000}
        assert screen.tracker.parser.state.lines == 1000 and screen.tracker.parser.state.engine == "sglang"
        assert screen.shown_offset == len(SERVING.encode()) * 500
        assert "\x1b" not in "".join(log.ring)
        screen._stop.set()


async def test_the_run_view_shows_a_line_being_drawn_but_not_one_a_read_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """A progress bar being redrawn, or a line still unterminated a read later or after a quiet
    second, shows below the log; the end of a read that cut a line mid-way does not (it ends in
    the next read, and each time the partial row came and went the screen was laid out again)."""

    shown: list[str] = []

    async def follow(host, path, offset, on_chunk, stop, *, on_idle, **kw):  # type: ignore[no-untyped-def]
        log = screen.query_one(ServerLog)
        for chunk in (
            b"line 1\nline 2 is cu",  # cut by the read
            b"t here\nLoading: 10%\rLoading: 20%",  # a bar being drawn
            b"\nline 3\nslow",  # cut again
            b" write",  # still not ended a read later
            b"\nline 4\nquiet",
        ):
            on_chunk(chunk)
            shown.append(log.partial)
        on_idle()  # a quiet second
        shown.append(log.partial)
        await stop.wait()
        return offset

    screen = _run_screen_fed_by(monkeypatch, follow)
    async with ScreenApp(screen).run_test(size=(120, 40)) as pilot:
        await until_async(lambda: len(shown) == 6, 10, pilot=pilot, what=lambda: f"{shown}")
        assert shown == ["", "Loading: 20%", "", "slow write", "", "quiet"]
        log = screen.query_one(ServerLog)
        log.flush_now()
        assert list(log.ring) == ["line 1", "line 2 is cut here", "Loading: 20%", "line 3", "slow write", "line 4"]
        screen._stop.set()


async def test_a_snapshot_that_reads_the_same_is_not_painted_again():
    """Snapshots come twice a second and the clock shows whole seconds: the second of two that
    differ by half a second repaints nothing; one a second later does."""
    app = ProgressApp()
    async with app.run_test(size=(80, 10)) as pilot:
        w = app.query_one(StartupProgressView)
        snap = StartupProgress("abc", "sglang", "starting", "weight-loading", fraction=0.4, elapsed=62.0, eta=90)
        w.update(snap)
        await pilot.pause()
        painted: list[bool] = []
        real = w.refresh

        def counting_refresh(*regions: object, **kw: bool) -> object:
            painted.append(True)
            return real(*regions, **kw)  # type: ignore[arg-type]

        w.refresh = counting_refresh  # type: ignore[method-assignment]
        w.update(replace(snap, elapsed=62.4))
        assert painted == [] and "elapsed 1m02s" in w.text
        w.update(replace(snap, elapsed=63.0))
        assert painted and "elapsed 1m03s" in w.text


async def test_a_quiet_log_holds_no_timer_and_a_line_shows_within_a_batch():
    app = LogApp()
    async with app.run_test(size=(100, 30)) as pilot:
        log = app.query_one(ServerLog)
        await pilot.pause()
        assert log._flush_timer is None  # nothing waits: nothing wakes the app
        log.append_lines(["one line"])
        assert log._flush_timer is not None
        await until_async(lambda: log.total_lines == 1, 5, pilot=pilot)
        assert log.view.lines[-1] == "one line"
        await until_async(lambda: log._flush_timer is None, 5, pilot=pilot)


async def test_the_view_is_as_wide_as_its_widest_line_at_once():
    """The width comes with the lines (no thread round trip): a search can scroll to the end of a
    long line at once. Wide characters and tabs count as the terminal shows them."""
    app = LogApp()
    async with app.run_test(size=(100, 30)) as pilot:
        log = app.query_one(ServerLog)
        await pilot.pause()
        view = log.view
        view.write_lines(["x" * 150, "short"])
        assert view.virtual_size.width == 150
        view.write_lines(["日本" * 100])  # 200 characters, 400 cells
        assert view.virtual_size.width == 400
        view.write_lines(["\t" * 60])  # a tab is up to 8 cells
        assert view.virtual_size.width == 480
