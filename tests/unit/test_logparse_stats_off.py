"""``LogParser(stats=False)`` (the startup tracker's: it follows a log at 1,000 lines/s) reads the
same start-up and failures as the full parser, only without the stat lines' figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunedeck.logparse import LogParser, StatEvent

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


def _run(path: Path, stats: bool) -> tuple[list[object], LogParser]:
    engine = "sglang" if path.name.startswith("sglang") else "vllm" if path.name.startswith("vllm") else None
    p = LogParser(engine, stats=stats)
    data = path.read_bytes()
    events = []
    for i in range(0, len(data), 4096):
        events += p.feed(data[i : i + 4096])
    events += p.finish()
    return events, p


LOG_FILES = sorted(x for x in LOGS.rglob("*.log"))


@pytest.mark.parametrize("path", LOG_FILES, ids=[x.name for x in LOG_FILES])
def test_the_start_up_and_the_failures_read_without_the_stat_figures_are_the_same(path: Path) -> None:
    full, pf = _run(path, True)
    lean, pl = _run(path, False)
    assert not any(isinstance(e, StatEvent) for e in lean)
    assert pl.state.last_stat is None
    assert lean == [e for e in full if not isinstance(e, StatEvent)]
    assert (pl.state.phase, pl.state.ready_line, pl.state.errors, pl.state.failure) == (
        pf.state.phase,
        pf.state.ready_line,
        pf.state.errors,
        pf.state.failure,
    )
