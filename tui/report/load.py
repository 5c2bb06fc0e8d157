"""From an id to a report, and the report to a file.

``ref`` is an A/B id from the journal (or a unique prefix), a benchmark result id from the
results store (or a prefix, or its folder), a sweep id (every level of the sweep), ``ABID:A`` /
``ABID:B`` (one side of an A/B), or a campaign's JSON file (``tune --json FILE``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from tunedeck.ab.compare import compare
from tunedeck.ab.journal import Journal
from tunedeck.ab.results import RefError, resolve_side, resolve_sides
from tunedeck.report.build import ab_report, result_report
from tunedeck.report.campaign import campaign_report
from tunedeck.report.htmlpage import to_html
from tunedeck.report.markdown import to_markdown
from tunedeck.report.parts import Report
from tunedeck.util.files import atomic_write_bytes, os_error_text

log = logging.getLogger(__name__)


class ReportError(Exception):
    """A report that cannot be made or written; the message is one line naming what and where."""


def _campaign_file(ref: str) -> dict[str, Any] | None:
    p = Path(ref)
    if p.suffix != ".json" or not p.is_file():
        return None
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ReportError(f"{ref}: unreadable ({e})") from None
    if not isinstance(obj, dict) or "campaign" not in obj or not isinstance(obj.get("candidates"), list):
        raise ReportError(f'{ref}: not a campaign result (needs "campaign" and a "candidates" list)')
    return obj


def build(ref: str, journal: Journal | None = None) -> Report:
    """The report of ``ref`` (see the module doc); :class:`ReportError` when there is none."""
    if not ref or not ref.strip():
        raise ReportError("give a result id, a sweep id, an A/B id or a campaign's JSON file")
    camp = _campaign_file(ref)
    if camp is not None:
        return campaign_report(camp)
    journal = journal or Journal()
    try:
        entry = journal.find(ref, "ab")
        if entry is not None:
            a, b, _ = resolve_sides([str(entry.get("id"))], journal)
            return ab_report(entry, a, b, compare(a, b))
        side = resolve_side(ref, "result", journal)
    except RefError as e:
        raise ReportError(str(e)) from None
    except OSError as e:
        raise ReportError(f"reading the stored results: {os_error_text(e)}") from None
    ids = [lv.run_id for run in side.runs for lv in run.levels if lv.run_id]
    return result_report(side, ids[0] if len(ids) == 1 else ref)


def render(report: Report, fmt: str) -> str:
    if fmt == "html":
        return to_html(report)
    if fmt == "markdown":
        return to_markdown(report)
    raise ValueError(f"unknown report format {fmt!r} (html, markdown)")


def write(text: str, dest: str | Path, *, force: bool = False) -> int:
    """Write ``text`` to ``dest`` whole or not at all; an existing ``dest`` is replaced only with
    ``force``. Returns the bytes written."""
    data = text.encode("utf-8")
    try:
        atomic_write_bytes(dest, data, replace=force)
    except FileExistsError as e:
        if e.filename2 is not None:  # the link onto a name that exists (a folder on the way is e.filename)
            raise ReportError(f"{dest}: already exists (--force replaces it)") from None
        log.error("report: writing %s failed: %s", dest, e)
        raise ReportError(f"cannot write {dest}: {os_error_text(e)}") from None
    except OSError as e:
        log.error("report: writing %s failed: %s", dest, e)
        raise ReportError(f"cannot write {dest}: {os_error_text(e)}") from None
    return len(data)


__all__ = ["ReportError", "build", "render", "write"]
