"""One pipeline for a log that is shown and tracked (``StartupTracker(lines=True)``, the run view's):
the view's :class:`LineSplitter` splits, decodes, redacts and makes safe each byte once, and the
tracker's parser reads those same segments. It reads what it reads from the raw bytes, and the
view shows what a splitter of its own shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from tunedeck.hostops import logfollow
from tunedeck.hostops.localhost import LocalHost
from tunedeck.hostops.logfollow import LINE_CAP, LineSplitter
from tunedeck.hostops.runstore import RunRecord
from tunedeck.hostops.tracker import StartupTracker
from tunedeck.logparse import LogEvent, patterns
from tunedeck.util.safety import REDACTED

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
LOG_FILES = sorted(LOGS.rglob("*.log"))


def _tracker(engine: str | None, *, lines: bool) -> tuple[StartupTracker, RunRecord]:
    rec = RunRecord(run_id="r1", target="local", argv=["x"], engine=engine or "other", pid=1, started=1000.0)
    return StartupTracker(LocalHost(), rec, lines=lines, clock=lambda: 1000.0), rec


def _follow(data: bytes, engine: str | None, size: int, *, lines: bool, shown: bool) -> tuple[object, ...]:
    """What a tracker reads of ``data`` fed in ``size``-byte chunks, flushed as an idle follow
    flushes it, then the process ends: (events, state, snapshot, timeline, lines shown)."""
    tr, rec = _tracker(engine, lines=lines)
    events: list[LogEvent] = []
    out: list[str] = []
    sp = LineSplitter()
    for k, i in enumerate(range(0, len(data), size)):
        chunk = data[i : i + size]
        if shown and lines:
            out += tr.feed_lines(chunk)
        elif shown:
            tr.feed(chunk)
            out += sp.feed(chunk)  # the view's own splitter, beside the tracker
        else:
            events += tr.feed(chunk)
        if k % 40 == 39:
            events += tr.flush()  # a pause: an unterminated progress bar is read
    tr.set_alive(False, 1)
    st = tr.parser.state
    facts = (st.phase, st.weights, st.graph, st.graph_bars, st.ready_line, st.errors, st.failure, st.facts, st.lines)
    return events, facts, st.engine, st.unreadable, tr.snapshot(), rec.timeline, out


def _same(path: Path, sizes: tuple[int, ...]) -> None:
    data = path.read_bytes()
    engine = "sglang" if path.name.startswith("sglang") else "vllm" if path.name.startswith("vllm") else None
    for size in sizes:
        for shown in (False, True):
            old = _follow(data, engine, size, lines=False, shown=shown)
            new = _follow(data, engine, size, lines=True, shown=shown)
            assert new == old, f"{path.name} in chunks of {size} bytes"


@pytest.mark.parametrize("path", LOG_FILES, ids=[p.name for p in LOG_FILES])
def test_the_tracker_reads_the_shown_lines_as_it_reads_the_bytes(path: Path) -> None:
    # 7-byte chunks cut every line, redraw and BOM somewhere; 64 KiB ones are a follow's reads
    _same(path, (7, 4096, 65536))


def test_the_real_logs_read_the_same_through_the_shown_lines(real_logs: Path) -> None:
    for path in sorted(real_logs.glob("*.log")):
        _same(path, (1000, 65536))


def _counted(f: Callable[..., str], calls: dict[str, int], key: str) -> Callable[..., str]:
    def counted(*args: Any, **kw: Any) -> str:
        calls[key] += 1
        return f(*args, **kw)

    return counted


def count_cleaning(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the redactions and sanitisations of the follower's splitter and of the parser."""
    calls = {"redact": 0, "safe": 0}
    for mod in (logfollow, patterns):
        monkeypatch.setattr(mod, "redact_text", _counted(mod.redact_text, calls, "redact"))
        monkeypatch.setattr(mod, "safe_line", _counted(mod.safe_line, calls, "safe"))
    return calls


SERVING = (
    "[2026-03-02 16:00:40 TP0] Decode batch. #running-req: 64, #token: 40001, token usage: 0.31, "
    "cuda graph: True, gen throughput (token/s): 2841.07, #queue-req: 0\n"
    "\x1b[0;36m(APIServer pid=41356)\x1b[0;0m INFO:     127.0.0.1:50000 - "
    '"POST /v1/chat/completions HTTP/1.1" 200 OK\n'
)


def test_each_line_is_redacted_and_made_safe_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_cleaning(monkeypatch)
    tr, _ = _tracker("sglang", lines=True)
    shown = tr.feed_lines(SERVING.encode() * 500)
    assert len(shown) == 1000 and tr.parser.state.lines == 1000
    assert calls == {"redact": 1000, "safe": 1000}


def test_the_parser_reads_every_redraw_frame_and_the_view_shows_the_last() -> None:
    seen: list[tuple[str, bool]] = []
    sp = LineSplitter(segments=lambda text, cr: seen.append((text, cr)))
    data = b"a\x1b]0;t\x07\r\rb\rc\r\nplain\n  \nx\ry"
    shown = [line for i in range(len(data)) for line in sp.feed(data[i : i + 1])]
    assert shown == ["c", "plain", "  "]
    assert seen == [
        ("a", True),
        ("", True),
        ("b", True),
        ("c", True),
        ("", False),  # the CRLF's empty end: the parser counts the line
        ("plain", False),
        ("  ", False),
        ("x", True),
    ]
    assert sp.tail() == "y" and sp.partial() == "y"
    assert sp.flush() == ["y"] and seen[-1] == ("y", False)


def test_a_segment_is_told_redacted_cut_and_without_colour() -> None:
    seen: list[tuple[str, bool]] = []
    sp = LineSplitter(sgr=True, segments=lambda text, cr: seen.append((text, cr)))
    (shown,) = sp.feed(b"\x1b[32mINFO\x1b[0m --api-key sk-abc " + b"z" * LINE_CAP + b"\n")
    ((text, cr),) = seen
    assert not cr
    assert shown.startswith("\x1b[32mINFO\x1b[0m --api-key ") and text.startswith("INFO --api-key ")
    assert REDACTED in text and "sk-abc" not in shown + text
    assert shown.endswith(" bytes cut") and "bytes cut" not in text and len(text.encode()) <= LINE_CAP


def test_a_utf8_bom_that_begins_the_log_is_not_shown() -> None:
    sp = LineSplitter()
    data = b"\xef\xbb\xbfINFO first\nINFO \xef\xbb\xbfsecond\n"
    assert [line for i in range(len(data)) for line in sp.feed(data[i : i + 1])] == [
        "INFO first",
        "INFO \\ufeffsecond",
    ]
    assert LineSplitter().feed_sized(b"\xef\xbb\xbfok\n") == [("ok", 6)]  # the offsets count it


def test_feed_lines_needs_a_tracker_that_cuts_lines() -> None:
    tr, _ = _tracker("vllm", lines=False)
    with pytest.raises(ValueError, match="lines=True"):
        tr.feed_lines(b"x\n")


def test_a_line_cut_by_the_read_is_told_from_one_being_drawn() -> None:
    sp = LineSplitter()
    for chunk, cut in (
        (b"one\ntw", True),  # the read cut "two"
        (b"o\n", False),  # nothing pending
        (b"thr", True),  # a chunk of one unterminated line that began in it
        (b"ee", False),  # it began a read earlier: written slowly
        (b"\nbar 1%\rbar 2%", False),  # redrawn: a progress bar
    ):
        sp.feed(chunk)
        assert sp.cut_short(chunk) is cut, chunk
