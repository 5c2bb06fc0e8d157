"""The tuning journal's entries for launches, written here for every launch whatever started
it: ``tunedeck launch`` and the dashboard's launch form alike."""

from __future__ import annotations

import logging

from tui.ab.journal import Journal
from tui.hostops.runstore import RunRecord
from tui.model import StartupProgress

log = logging.getLogger(__name__)


def journal_launch(rec: RunRecord, final: StartupProgress, *, profile: str | None = None) -> str | None:
    """Record how a launch's startup ended (ready, failed, stalled, stopped). Returns None, or
    one line saying why the journal could not be written (the launch itself stands)."""
    try:
        Journal().record_launch(
            rec.run_id,
            profile=profile or rec.profile or "",
            host=rec.target,
            ready=final.state == "ready",
            startup_s=final.elapsed if final.state == "ready" else None,
            server_log=f"{rec.run_dir}/log" if rec.run_dir else None,
            timeline=[dict(t) for t in (rec.timeline or [])],
            diagnosis=final.diagnosis,
        )
    except (OSError, ValueError) as e:
        log.warning("run %s: journal not written: %s", rec.run_id, e)
        return f"journal not written ({e})"
    return None
