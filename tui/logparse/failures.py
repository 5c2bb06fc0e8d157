"""The failures of one server start: Python tracebacks followed per process, fatal texts, bare
exception lines, and which of them the engine went down with (:class:`Failures`). The parser
(:mod:`tunedeck.logparse.parser`) hands it every line; the fatal texts themselves are classified in
:mod:`tunedeck.logparse.patterns`."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from tunedeck.logparse.events import ErrorEvent, LogEvent
from tunedeck.logparse.patterns import (
    EXC_LINE_RE,
    MAX_ERRORS,
    RAY_PG_WAIT,
    TB_CHAIN,
    TB_EXC_LINE_RE,
    TB_START,
    WRAPPER_RE,
    LogLine,
    classify,
    clean_line,
    exc_cause,
    might_be_fatal,
    refine_cause,
)

if TYPE_CHECKING:
    from tunedeck.logparse.parser import LogParser


class _Traceback:
    """One process's traceback chain being read (see :meth:`LogParser._traceback`)."""

    __slots__ = ("chain_open", "engine", "err_index", "frames", "in_frames", "program", "wrapper")

    def __init__(self) -> None:
        self.in_frames = False
        self.chain_open = False  # "During handling …" / "The above exception …" seen
        self.err_index: int | None = None  # index of the chain's root error in state.errors
        self.wrapper: str | None = None  # "Scheduler hit an exception: Traceback …"
        self.frames = 0
        #: the engine's own: opened by a line with the engine's prefix, or a frame in its code
        self.engine = False
        #: a frame in a program's own code (neither the engine's nor an installed library's)
        self.program = False


#: where installed libraries' frames live ('File "…/site-packages/requests/models.py"')
_LIBRARY_DIRS = ("site-packages", "dist-packages", "/lib/python", "<frozen ")
#: frame lines read before a traceback with no exception line is given up
_MAX_FRAMES = 400
#: exceptions that only say a lookup failed; an outer exception of the chain explains them
_PLUMBING = frozenset({"KeyError", "IndexError", "StopIteration", "LookupError"})


def _strip_prefix(text: str) -> str:
    return clean_line(text).msg.strip()


class Failures:
    """What went wrong in one start (a new start in the same log gets a new one): the tracebacks
    being read per process, the errors reported, the lines the engine went down with."""

    def __init__(self, p: LogParser) -> None:
        self.p = p
        self._errors_seen: set[tuple[str, str]] = set()
        self._tbs: dict[str, _Traceback] = {}
        self._tb_cur: str = ""
        self._ray_wait: str | None = None
        self._last_wrapper: dict[str, str] = {}
        #: lines of root exceptions the engine went down with (their traceback opened by a wrapper, or a
        #: wrapper or signal after them): serving lines of another rank do not clear them
        self._fatal_lines: set[int] = set()

    def line(self, ln: LogLine, msg: str, no: int, seg: int | None, events: list[LogEvent]) -> None:
        """A line outside any traceback: a fatal text, a bare exception line, or a Ray placement wait."""
        if might_be_fatal(msg) and self._fatal_message(ln, msg, no, seg, events):
            pass
        elif ("Error" in msg or "Exception" in msg) and not msg[:1].isspace():
            self._bare_exception(ln, msg.strip(), no, seg, events)
        elif RAY_PG_WAIT.search(msg) if "lacement" in msg or "resource" in msg or "no GPU" in msg else False:
            self._ray_wait = ln.text.strip()

    def confirm_at_end(self, progress_line: int) -> None:
        st = self.p.state
        if st.ready_line is None and any(e.provisional and e.line_no > progress_line for e in st.errors):
            st.errors = [
                replace(e, provisional=False) if e.provisional and e.line_no > progress_line else e for e in st.errors
            ]

    def recovered(self) -> None:
        """The engine came up (ready line) or serves (stat lines): a generic traceback seen
        before it was not fatal, nor a request's traceback after ready. One the engine said it
        went down with stays: progress of one rank proves nothing, other ranks go on for a while
        after the first one died."""
        st = self.p.state

        def survived(e: ErrorEvent) -> bool:
            return (
                e.origin == "exception" and (e.kind == "crash" or e.provisional) and e.line_no not in self._fatal_lines
            )

        if any(survived(e) for e in st.errors):
            st.errors = [e for e in st.errors if not survived(e)]
            for tb in self._tbs.values():
                tb.err_index = None

    def add_error(self, err: ErrorEvent, events: list[LogEvent]) -> int | None:
        st = self.p.state
        key = (err.kind, err.line)
        if key in self._errors_seen:
            return None
        if len(st.errors) >= MAX_ERRORS and any(e.kind == err.kind for e in st.errors):
            return None
        self._errors_seen.add(key)
        if err.origin in ("wrapper", "terminated"):
            # the engine went down after those tracebacks: they were fatal after all
            self._fatal_lines.update(e.line_no for e in st.errors if e.origin == "exception")
            if any(e.provisional for e in st.errors):
                st.errors = [replace(e, provisional=False) if e.provisional else e for e in st.errors]
        st.errors.append(err)
        events.append(err)
        return len(st.errors) - 1

    def _foreign_port(self, text: str) -> bool:
        """A bare bind error on a port the engine does not serve on (its URL or its arguments say which;
        an engine default proves nothing), or, without one, after another program's uvicorn block."""
        m = _BIND_PORT.search(text)
        st = self.p.state
        port = st.port if st.http_url or st.declared_port is not None else None  # known, not a default
        if m is not None and port is not None:
            return int(m.group(1)) != port
        return self.p._foreign_uvicorn

    def _bare_exception(self, ln: LogLine, text: str, no: int, seg: int | None, events: list[LogEvent]) -> None:
        """An exception line outside any traceback we saw begin (an excerpt pasted from the middle of
        one, or a process that prints only the last line): it is the failure once the engine dies
        after it (a wrapper, a signal, the file's end with no progress since); until then provisional."""
        m = EXC_LINE_RE.match(text) or TB_EXC_LINE_RE.match(text)
        if m is None or not m.group(1).endswith(("Error", "Exception")):
            return
        st = self.p.state
        err = ErrorEvent(
            "crash",
            exc_cause(text),
            ln.text.strip(),
            ln.time or st.last_time,
            no,
            tuple(self.p._context),
            segment=seg,
            origin="exception",
            rank=ln.rank,
            attempt=st.attempt,
            provisional=True,
        )
        self.add_error(err, events)

    def _fatal_message(self, ln: LogLine, msg: str, no: int, seg: int | None, events: list[LogEvent]) -> bool:
        """A fatal text outside a traceback; True when ``msg`` is one."""
        c = classify(msg)
        if c is None:
            return False
        kind, cause = c
        text = msg.strip()
        if kind == "port" and ln.engine_hint is None and self._foreign_port(text):
            return True  # another program's server could not bind its own port
        if kind == "crash" and self.p._stopping:
            return True  # a crash text in the teardown of a server that stopped in order
        if kind == "terminated":
            origin = "terminated"
            if self._ray_wait is not None:
                cause += " while waiting for GPUs for a Ray placement group"
        elif WRAPPER_RE.search(text):
            origin = "wrapper"
        elif EXC_LINE_RE.match(text):
            origin = "exception"
        else:
            origin = "message"
        if origin == "wrapper":
            self._last_wrapper[ln.rank] = text
            # the wrapper is context for the root exception it reports
            for i, e in enumerate(self.p.state.errors):
                if e.origin == "exception" and e.wrapper is None:
                    self.p.state.errors[i] = replace(e, wrapper=text)
        ctx = tuple(self.p._context)
        if origin == "terminated" and self._ray_wait is not None:
            ctx = ctx + (self._ray_wait,)
        err = ErrorEvent(
            kind,
            cause,
            ln.text.strip(),
            ln.time,
            no,
            ctx,
            segment=seg,
            origin=origin,
            rank=ln.rank,
            attempt=self.p.state.attempt,
        )
        self.add_error(err, events)
        return True

    def traceback(self, ln: LogLine, msg: str, no: int, seg: int | None, events: list[LogEvent]) -> bool:
        """Follow Python tracebacks per process; True when the line belongs to one
        (a frame, or the exception line, which is handled here)."""
        if ln.rank:
            key = ln.rank
        elif ln.engine_hint or ln.source:
            key = "<main>" + ln.source
        else:
            key = self._tb_cur  # unprefixed lines continue the traceback being printed
        if TB_START in msg:
            tb = self._tbs.get(key)
            if tb is None or not tb.chain_open:
                tb = self._tbs[key] = _Traceback()
                head = msg[: msg.index(TB_START)].strip()
                if head:
                    tb.wrapper = ln.text.strip()
                tb.engine = ln.engine_hint is not None
            tb.in_frames = True
            tb.chain_open = False
            tb.frames = 0
            self._tb_cur = key
            return True
        tb = self._tbs.get(key)
        if tb is None:
            return False
        if not tb.in_frames:
            if TB_CHAIN.match(msg.strip()):
                tb.chain_open = True
                return True
            return False
        stripped = msg.strip()
        if not stripped:
            return True
        if stripped[0] in "|+" and msg[:1].isspace():
            # an exception group's gutter ("  | ValueError: …", "  +---- 1 ----")
            if stripped[0] == "+":
                return True
            msg = stripped[1:]
            msg = msg[1:] if msg.startswith(" ") else msg
            stripped = msg.strip()
            if not stripped:
                return True
        m = None
        if not msg[:1].isspace() and not stripped.startswith("File "):
            m = EXC_LINE_RE.match(stripped) or TB_EXC_LINE_RE.match(stripped)
        if m is None:
            tb.frames += 1
            if not tb.engine and ("vllm" in stripped or "sglang" in stripped):
                tb.engine = True
            elif not tb.engine and stripped.startswith('File "') and not any(d in stripped for d in _LIBRARY_DIRS):
                tb.program = True
            if tb.frames > _MAX_FRAMES:
                tb.in_frames = False
            return True
        tb.in_frames = False
        if tb.engine or tb.frames == 0 or (classify(stripped) or ("crash",))[0] not in ("crash", "terminated"):
            self._exception(tb, ln, stripped, m.group(1), no, seg, events)
        elif not tb.program:
            # every frame in installed libraries (huggingface_hub, requests, safetensors …): the engine
            # called them; it counts once the engine dies after it
            self._exception(tb, ln, stripped, m.group(1), no, seg, events, library=True)
        # else: another program's traceback in the same log (no engine prefix, a frame in its own code,
        # none in the engine's, nothing an engine failure would say)
        return True

    def _exception(
        self,
        tb: _Traceback,
        ln: LogLine,
        exc: str,
        name: str,
        no: int,
        seg: int | None,
        events: list[LogEvent],
        *,
        library: bool = False,
    ) -> None:
        st = self.p.state
        c = classify(exc)
        if tb.err_index is None or tb.err_index >= len(st.errors):
            # the root (innermost) exception of this chain
            if name.endswith(("KeyboardInterrupt", "SystemExit")):
                kind, cause, origin = (
                    "terminated",
                    refine_cause("terminated", "terminated by a signal", exc),
                    "terminated",
                )
                if "terminated" in exc:
                    cause = "terminated by a signal (KeyboardInterrupt: terminated)"
            elif c is not None and c[0] not in ("crash", "terminated"):
                kind, cause, origin = c[0], c[1], "exception"
            elif WRAPPER_RE.search(exc):
                kind, cause, origin = "crash", "engine crashed (the cause is in an earlier traceback)", "wrapper"
            else:
                kind, cause, origin = "crash", exc_cause(exc), "exception"
            wrapper = tb.wrapper or self._last_wrapper.get(ln.rank)
            going_down = _going_down(wrapper)
            proof = ln.text.strip()
            if proof.startswith("| "):
                proof = proof[2:]  # an exception group's gutter
            err = ErrorEvent(
                kind,
                cause,
                proof,
                ln.time or st.last_time,
                no,
                tuple(self.p._context),
                segment=seg,
                origin=origin,
                wrapper=wrapper,
                rank=ln.rank,
                attempt=st.attempt,
                # after ready a traceback is a request's, whatever its kind (a request's image URL
                # answering 404 is no refusal of the model), unless the engine says it is going down
                # ("Scheduler hit an exception: Traceback …", or that rank's wrapper line above it);
                # a generic one in libraries' frames counts once the engine dies
                provisional=origin == "exception"
                and ((kind == "crash" and library) or (st.ready_line is not None and not going_down)),
            )
            if going_down and origin == "exception":
                self._fatal_lines.add(no)
            idx = self.add_error(err, events)
            if idx is None:
                # the same exception again (another rank, or the traceback printed twice): keep reading it as one
                for i, e in enumerate(st.errors):
                    if e.kind == kind and e.line == err.line:
                        idx = i
                        break
            tb.err_index = idx
            return
        # an outer exception of the chain: it may name the kind (capture failed …); it is the
        # proof only when the root is a lookup that the outer one translates ("KeyError: 'x'"
        # then "ValueError: … model type `x` … not recognized")
        root = st.errors[tb.err_index]
        rm = EXC_LINE_RE.match(_strip_prefix(root.line))
        if (
            rm is not None
            and rm.group(1).rsplit(".", 1)[-1] in _PLUMBING
            and root.origin == "exception"
            and not WRAPPER_RE.search(exc)
            and (c is None or c[0] not in ("crash", "terminated", "capture-failed"))
        ):
            if c is not None:
                kind, cause = c
            else:
                kind, cause = "crash", exc_cause(exc)
            upd = replace(
                root,
                kind=kind,
                cause=cause,
                line=ln.text.strip(),
                time=ln.time,
                line_no=no,
                segment=seg,
                wrapper=root.line,
                rank=ln.rank or root.rank,
            )
            if root.line_no in self._fatal_lines:
                self._fatal_lines.add(no)
            st.errors[tb.err_index] = upd
            events.append(upd)
            return
        upd = root
        if root.wrapper is None or root.wrapper == tb.wrapper:
            upd = replace(upd, wrapper=exc)
        if (
            root.kind == "crash"
            and root.origin == "exception"
            and c is not None
            and c[0] not in ("crash", "terminated")
        ):
            kind, cause = c
            upd = replace(upd, kind=kind, cause=cause)
        if upd is not root:
            st.errors[tb.err_index] = upd
            events.append(upd)

    # ------------------------------------------------------------------ pieces


#: the port of a bind error ("bind on address ('0.0.0.0', 8000)")
_BIND_PORT = re.compile(r"\('[^']*', (\d+)\)")


def _going_down(wrapper: str | None) -> bool:
    """The line that opened a traceback says the engine goes down with it ("Scheduler hit an exception")."""
    return wrapper is not None and WRAPPER_RE.search(wrapper) is not None
