"""A deployment's merged log: every member's lines with a node tag, in time order."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Mapping, Sequence

from tunedeck.hostops.hosts import Host
from tunedeck.hostops.logfollow import LineSplitter
from tunedeck.hostops.runstore import RunStore
from tunedeck.services.deploy.records import DeploymentRecord

_TS_RE = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)[^\]]*\]|\b(\d\d-\d\d \d\d:\d\d:\d\d)\b")


async def read_log(host: Host, run_dir: str, max_bytes: int = 4 << 20) -> str:
    r = await host.run(["tail", "-c", str(max_bytes), "--", f"{run_dir}/log"], timeout=60)
    return r.stdout if r.ok else ""


def log_time(text: str | None, now: float | None = None) -> float | None:
    """Epoch seconds of an engine log timestamp: SGLang ``YYYY-MM-DD HH:MM:SS[.mmm]``, vLLM
    ``MM-DD HH:MM:SS`` (this year), in this machine's time zone."""
    if not text:
        return None
    for fmt in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(text, fmt).timestamp()
        except ValueError:
            pass
    try:
        year = datetime.fromtimestamp(now or time.time()).year
        return datetime.strptime(f"{year}-{text}", "%Y-%m-%d %H:%M:%S").timestamp()
    except ValueError:
        return None


def line_time(line: str) -> float | None:
    """Epoch seconds of the engine timestamp in a log line (None when it shows none)."""
    m = _TS_RE.search(line)
    return log_time(m.group(1) or m.group(2)) if m else None


def merge_logs(logs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(tag, log text) per member → (tag, line) in time order: each line sorts by the last
    timestamp its own log showed (lines without one follow the line before them), so each
    member's lines keep their order; each line as the run view shows it (:class:`LineSplitter`:
    ``\\r`` redraws keep only their last frame, secrets redacted, escape sequences removed, cut
    at 16 KiB)."""
    keyed: list[tuple[float, int, int, str, str]] = []
    for mi, (tag, text) in enumerate(logs):
        last = 0.0
        splitter = LineSplitter()
        lines = splitter.feed(text.encode("utf-8", "surrogateescape")) + splitter.flush() if text else []
        for li, line in enumerate(lines):
            t = line_time(line)
            if t is not None:
                last = t
            keyed.append((last, mi, li, tag, line))
    keyed.sort(key=lambda k: (k[0], k[1], k[2]))
    return [(tag, line) for _, _, _, tag, line in keyed]


async def merged_log(
    rec: DeploymentRecord, hosts: Mapping[str, Host], *, node: str | None = None, runstore: RunStore | None = None
) -> list[tuple[str, str]]:
    runstore = runstore or RunStore()
    logs: list[tuple[str, str]] = []
    for m in rec.members:
        if node is not None and node not in (m.node, m.tag):
            continue
        run = runstore.load(m.run_id)
        if run is None or not run.run_dir:
            continue
        logs.append((m.tag, await read_log(hosts[m.node], run.run_dir)))
    return merge_logs(logs)
