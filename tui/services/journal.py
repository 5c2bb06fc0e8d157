"""The tuning journal's entries for launches, written here for every launch whatever started
it: ``tunedeck launch`` and the dashboard's launch form alike; and the corrections appended when
a run the journal reads as ready is later found dead (the journal is append-only: a correction is
a newer record of the same launch, never an edit)."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Sequence

from tunedeck.ab.journal import Journal
from tunedeck.hostops.hostruns import reattach
from tunedeck.hostops.hosts import Host, target_name
from tunedeck.hostops.runstore import FAILED, RunRecord, RunStore
from tunedeck.model import StartupProgress

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


#: per journal (by its path): the failed runs already checked against it, and the journal's
#: inode, size and modification time when they were. A dashboard re-reads every few seconds and the
#: journal is megabytes; it is parsed again only when a run has newly failed or the journal has
#: changed since (a tuning campaign writes its launches when it ends, "ready" ones included)
_checked: dict[Path, tuple[tuple[int, int, int] | None, set[str]]] = {}
#: one check at a time: two hosts re-read at once must not both append the same correction
_checking = threading.Lock()


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def journal_corrections(recs: Sequence[RunRecord], journal: Journal | None = None) -> list[str]:
    """For every failed run whose launch the journal still reads as ``ready``, append the
    correction (status ``failed``, the cause and its proving line, ``corrects: ready``).
    Returns the run ids corrected; a journal that cannot be written is logged, the runs stand."""
    j = journal or Journal()
    with _checking:
        sig = _signature(j.path)
        seen, checked = _checked.get(j.path, (None, set()))
        if sig != seen:
            checked = set()
        _checked[j.path] = (sig, checked)
        failed = [r for r in recs if r.status == FAILED and r.run_id not in checked]
        if not failed:
            return []
        return _correct(j, failed, checked)


def _correct(j: Journal, failed: Sequence[RunRecord], checked: set[str]) -> list[str]:
    try:
        latest = {str(e.get("id")): e for e in j.entries("launch")}
    except (OSError, ValueError) as exc:
        log.warning("journal not read for corrections: %s", exc)
        return []
    done: list[str] = []
    for r in failed:
        e = latest.get(r.run_id)
        if e is None or e.get("status") != "ready":
            checked.add(r.run_id)  # read again once the journal changes (an entry written late)
            continue
        try:
            j.append(
                {
                    **{k: e.get(k) for k in ("profile", "host", "startup_s", "server_log", "ab_id", "side")},
                    "kind": "launch",
                    "id": r.run_id,
                    "status": FAILED,
                    "diagnosis": r.diagnosis,
                    "proof": r.proof,
                    "corrects": "ready",
                    "timeline": [dict(t) for t in (r.timeline or [])],
                }
            )
        except (OSError, ValueError) as exc:
            log.warning("run %s: journal correction not written: %s", r.run_id, exc)
            continue
        log.info("run %s: journal corrected: ready, then failed: %s", r.run_id, r.diagnosis)
        checked.add(r.run_id)
        done.append(r.run_id)
    return done


async def reread_runs(host: Host, store: RunStore | None = None) -> list[RunRecord]:
    """:func:`tunedeck.hostops.hostruns.reattach` (every run on ``host`` re-read from its process, a
    dead one settled from its log), then the journal's corrections for the runs that were ready
    and have failed since. Returns the live runs."""
    store = store or RunStore()
    live = await reattach(host, store)
    target = target_name(host)
    # the store and, when a run has newly failed, the journal: files read in a thread
    await asyncio.to_thread(lambda: journal_corrections(store.all(target)))
    return live
