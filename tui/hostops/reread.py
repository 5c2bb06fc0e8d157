"""A run re-read from its host: how a run whose process has ended ended, from its own log.

The same verdict whatever looked: the startup tracker that follows a run, and every listing that
finds a run's process gone (``tunedeck runs``, ``logs``, ``stop``, the Runs view, the fleet's and
the deployments' listings through :func:`tunedeck.hostops.hostruns.reattach`). A run that was ready and
later died reads ``failed`` with the cause its log gives (through the log parser), not a bare
``exited``; one stopped on request reads ``stopped``.
"""

from __future__ import annotations

import logging

from tunedeck.hostops.hosts import Host
from tunedeck.hostops.logfollow import LineSplitter, read_log
from tunedeck.hostops.runstore import FAILED, STALE, STOPPED
from tunedeck.logparse import LogParser, ParseState

log = logging.getLogger(__name__)

#: how much of an ended run's log is read for its verdict (its end: the root exception is there)
TAIL_BYTES = 4 << 20


async def read_tail(host: Host, run_dir: str, size: int | None = None) -> bytes:
    """The last :data:`TAIL_BYTES` of a run's log (``size``: its size, when known)."""
    path = f"{run_dir}/log"
    if size is not None and size > TAIL_BYTES:
        return await read_log(host, path, size - TAIL_BYTES)
    data = await read_log(host, path)
    return data[-TAIL_BYTES:]


def parse_log_bytes(data: bytes, engine: str | None, *, ended: bool) -> ParseState:
    """The parser's summary of a whole log (its last, unterminated line included). ``ended``: the
    log's writer is gone, so an exception the log ends on (a library's traceback, a bare
    exception line, with no progress or ready line after it) is final, as the live tracker
    judges it once it sees the process end (:meth:`tunedeck.logparse.LogParser.ended`)."""
    parser = LogParser(engine if engine in ("sglang", "vllm") else None)
    parser.feed(data)
    if ended:
        parser.ended()
    else:
        parser.flush(everything=True)
    return parser.state


async def log_state(host: Host, run_dir: str, engine: str | None, size: int | None = None) -> ParseState:
    """The parser's summary of the log of a run still running on ``host`` (its last exception
    may yet be followed by more: it stays provisional)."""
    return parse_log_bytes(await read_tail(host, run_dir, size), engine, ended=False)


# $1.. run folders: prints "<folder> <seconds since the log last changed>" (the host's own clock)
_LOG_AGE = r"""now=$(date +%s)
for d in "$@"; do
  m=$(stat -c %Y "$d/log" 2>/dev/null) && echo "$d $((now - m))"
done
exit 0
"""


async def log_ages(host: Host, run_dirs: list[str]) -> dict[str, float]:
    """Run folder → seconds since its log last changed (one command; a folder without a log is left out)."""
    if not run_dirs:
        return {}
    r = await host.run_script(_LOG_AGE, run_dirs, timeout=30)
    out: dict[str, float] = {}
    for line in r.stdout.splitlines():
        d, _, age_s = line.rpartition(" ")
        if d in run_dirs and age_s.isdigit():
            out[d] = float(age_s)
    return out


def last_line(data: bytes) -> str | None:
    """The log's last non-blank line as shown (ANSI stripped, the last ``\\r`` frame)."""
    sp = LineSplitter()
    lines = sp.feed(data) + sp.flush()
    for line in reversed(lines):
        if line.strip():
            return line.strip()[:300]
    return None


def ended_verdict(state: ParseState, rc: int | None, last: str | None) -> tuple[str, str, str | None]:
    """(status, diagnosis, proof) of a run whose process has ended (not on request): the log's
    root exception when there is one, else its exit status."""
    f = state.failure
    if f is not None:
        return FAILED, f.cause, f.line
    if rc is None:
        return FAILED, "process exited without an exit status", last
    return FAILED, f"process exited with rc {rc}", last


async def settle(
    host: Host, run_dir: str, engine: str | None, rc: int | None, *, stopping: bool, size: int | None = None
) -> tuple[str, str, str | None]:
    """(status, diagnosis, proof) of a run found ended on ``host``: ``stopped`` when a stop was
    asked for, else :func:`ended_verdict` over its log. A process gone with no exit status and
    nothing fatal in its log (a wrapper killed, a host rebooted) stays ``stale``."""
    if stopping:
        return STOPPED, "stopped (by you)", None
    data = await read_tail(host, run_dir, size)
    st = parse_log_bytes(data, engine, ended=True)
    if rc is None and st.failure is None:
        return STALE, "the process is gone and wrote no exit status", last_line(data)
    return ended_verdict(st, rc, last_line(data))


__all__ = [
    "TAIL_BYTES",
    "ended_verdict",
    "last_line",
    "log_ages",
    "log_state",
    "parse_log_bytes",
    "read_tail",
    "settle",
]
