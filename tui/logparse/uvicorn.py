"""uvicorn's lines, which both engines' HTTP servers print (and other programs in the same log):
whose server started, on which URL, and when it stops in order."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tunedeck.logparse.patterns import UVICORN_RUNNING, UVICORN_STARTED
from tunedeck.logparse.rules import Rule

if TYPE_CHECKING:
    from tunedeck.logparse.parser import LogParser
    from tunedeck.logparse.patterns import LogLine

_URL_PORT = re.compile(r":(\d+)")


def _uvicorn_started(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    """A bare uvicorn block whose pid is not one of the engine's belongs to another program."""
    assert m is not None
    if ln.engine_hint is not None:
        own = True
    elif p._engine_pids:
        own = int(m.group(1)) in p._engine_pids
    else:
        st = p.state
        own = p._server_up or st.kv_seen or st.graph_seen
        # a second bare uvicorn process in the same start is another program's
        own = own and p._uvicorn_pid in (None, int(m.group(1)))
    p._foreign_uvicorn = not own
    if own:
        p._uvicorn_pid = int(m.group(1))


def _uvicorn_running(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    assert m is not None
    if not p.own_server_line(ln):
        return
    port = m.group(2) or next(iter(_URL_PORT.findall(m.group(3) or "")[-1:]), "")
    declared = p.state.declared_port
    if ln.engine_hint is None and declared is not None and port and int(port) != declared:
        p._foreign_uvicorn = True  # a bare server on a port the engine never asked for: another program's
        return
    url = f"http://{m.group(1)}:{m.group(2)}" if m.group(2) else m.group(3)
    p.server_url(url, announced=False)


def _uvicorn_stopping(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    """The engine's server stops in order after serving: what dies after this is its teardown."""
    if p.state.ready_line is not None and p.own_server_line(ln):
        p._stopping = True


#: uvicorn's lines, which both engines (and other programs in the same log) print
SHARED: tuple[Rule, ...] = (
    Rule("Shutting down", None, _uvicorn_stopping, start=True),
    Rule("Waiting for application shutdown", None, _uvicorn_stopping, start=True),
    Rule("Started server process [", UVICORN_STARTED, _uvicorn_started, claim=True),
    Rule("Uvicorn running on", UVICORN_RUNNING, _uvicorn_running, start=True, claim=True),
)
