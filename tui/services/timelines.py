"""The stored timeline of a result (``timeline.jsonl`` and the summary's validity findings)
as a :class:`tunedeck.timeline_model.TimelineSnapshot`, for the screens that chart it.

Laptop side only (not shipped in the host runtime, whose ``tui/bench`` must import under the
standard library alone): it reads the local results store, where a host-side run's folders
are mirrored.
"""

from __future__ import annotations

from tunedeck.bench.store import _read_json, run_dir
from tunedeck.hostside.timeline import read_timeline
from tunedeck.timeline_model import MAX_ROWS, TimelineSnapshot, workload_measures


def stored_timeline(run_id: str, *, label: str | None = None, max_rows: int = MAX_ROWS) -> TimelineSnapshot:
    """``run_id``'s timeline (no rows when it has none: a run without a host-side timeline).

    ``label`` defaults to the level's concurrency (``C=16``) or the run id. Raises
    :class:`tunedeck.bench.store.StoreError` for an invalid run id and OSError for an unreadable file.
    """
    d = run_dir(run_id)
    summary = _read_json(d / "summary.json") or {}
    if label is None:
        c = summary.get("max_concurrency")
        if c is None:
            c = (_read_json(d / "meta.json") or {}).get("max_concurrency")
        label = f"C={c}" if c is not None else run_id
    return TimelineSnapshot.from_rows(
        read_timeline(d),
        label=label,
        validity=summary.get("validity"),
        run_id=run_id,
        max_rows=max_rows,
        measures=workload_measures(summary) if summary else "",
    )


__all__ = ["stored_timeline"]
