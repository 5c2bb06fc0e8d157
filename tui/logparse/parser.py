"""The incremental parser: bytes in, :mod:`tui.logparse.events` out."""

from __future__ import annotations

import codecs
import re
from collections import deque
from dataclasses import replace
from typing import Callable, Iterable, Iterator

from tui.logparse import sglang, vllm
from tui.logparse.decode import SNIFF_CHARS, might_be_bom, not_text, sniff
from tui.logparse.events import (
    ENGINES,
    PHASE_INDEX,
    ErrorEvent,
    FactEvent,
    LogEvent,
    ParseState,
    PhaseEvent,
    StatEvent,
)
from tui.logparse.patterns import (
    EXC_LINE_RE,
    GLUED_RE,
    MAX_ERRORS,
    MAX_LINE,
    RAY_PG_WAIT,
    SG_GRAPH_BEGIN,
    SG_GRAPH_END,
    SG_GRAPH_PROG,
    SG_STAT_FIELDS,
    SHARDS,
    TB_CHAIN,
    TB_EXC_LINE_RE,
    TB_START,
    TQDM,
    UVICORN_RUNNING,
    UVICORN_STARTED,
    VL_ATTEMPT,
    VL_GRAPH_BEGIN,
    VL_GRAPH_DONE,
    VL_GRAPH_PROG,
    VL_KV_USAGE,
    VL_PREFIX_HIT,
    VL_STATS,
    WRAPPER_RE,
    LogLine,
    classify,
    clean_line,
    exc_cause,
    might_be_fatal,
    refine_cause,
)
from tui.logparse.rules import Rule, RuleTable

# --------------------------------------------------------------------------- parser


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


class LogParser:
    """Incremental parser. ``feed`` / ``feed_text`` / ``feed_line`` return the new events.

    Lines are counted as the file's physical lines (``\\n``); tqdm redraws joined
    by ``\\r`` are parsed one by one and numbered as segments of their line."""

    def __init__(self, engine: str | None = None, *, context_lines: int = 30, stats: bool = True) -> None:
        """``stats=False``: runtime stat lines are recognised (the engine serves) but their
        figures are not read, so they give no :class:`StatEvent` and no ``state.last_stat``
        (for a reader that wants only the start-up and its failures, at 1,000 lines a second)."""
        if engine is not None and engine not in ENGINES:
            raise ValueError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
        self.stats = stats
        self.state = ParseState(engine=engine)
        self._engine_fixed = engine is not None
        self._votes = {"sglang": 0, "vllm": 0}
        #: chosen from the first bytes (a BOM, else UTF-8); None while they may yet be a BOM
        self._decoder: codecs.IncrementalDecoder | None = None
        self._codec = "utf-8"
        self._head = b""
        #: the start of the decoded text, until it is judged text or not (None once judged)
        self._sample: str | None = ""
        self._buf = ""
        self._phys = 0  # complete physical lines read
        self._seg = 0  # segments of the current physical line already parsed
        self._flushed: tuple[int, int, str] | None = None  # (line, segment, text) parsed by flush()
        self._cur_line = 1
        self._cur_seg: int | None = None
        self._context: deque[str] = deque(maxlen=context_lines)
        self._engine_sources: set[str] = set()
        self._engine_pids: set[int] = set()
        #: the processes (prefix pids) of the current start, and of the earlier starts in the log
        self._pids: set[int] = set()
        self._old_pids: set[int] = set()
        #: the file tail's last "==> name <==" header named, and the files that hold the engine's lines
        self._tail_file: str | None = None
        self._engine_files: set[str] = set()
        self._rules = _RULES
        self._ln = clean_line("")
        self._events: list[LogEvent] = []
        self._no = 0
        self._segno: int | None = None
        self._reset_attempt()

    def _reset_attempt(self) -> None:
        self._errors_seen: set[tuple[str, str]] = set()
        self._last_progress: tuple[str, str, int, int] | None = None
        self._fact_rank: dict[str, str] = {}
        self._tbs: dict[str, _Traceback] = {}
        self._tb_cur: str = ""
        self._sg_capture_open = False
        self._server_up = False  # the engine's HTTP server start line was seen
        self._foreign_uvicorn = False  # bare uvicorn lines now come from another program
        self._uvicorn_pid: int | None = None  # the engine's uvicorn ("Started server process [N]")
        self._stopping = False  # the engine's server began an orderly shutdown after serving
        self._ray_wait: str | None = None
        self._last_wrapper: dict[str, str] = {}
        #: lines of root exceptions the engine went down with (their traceback opened by a wrapper, or a
        #: wrapper or signal after them): serving lines of another rank do not clear them
        self._fatal_lines: set[int] = set()
        self._progress_line = 0  # the last line that moved the startup on

    def _other_program(self, ln: LogLine) -> bool:
        """The line is not the engine's: a compose service or pod, or a file in a ``tail`` of several,
        that never wrote an engine line; or an error of a process of an earlier start in the same log
        (an INFO line from such a pid is this start's: pids repeat when a container restarts)."""
        if ln.pid is not None:
            if ln.pid in self._old_pids:
                if ln.level in ("", "ERROR", "CRITICAL"):
                    return True  # an earlier start's process dying after this start began
                self._old_pids.discard(ln.pid)  # the pid reused by this start (a restarted container)
            if "API" in ln.rank:
                self._engine_pids.add(ln.pid)  # the API server runs the engine's uvicorn
        if ln.source:
            if ln.engine_hint:
                self._engine_sources.add(ln.source)
            elif self._engine_sources and ln.source not in self._engine_sources:
                return True
        f = self._tail_file
        if f is None or f in self._engine_files:
            return False
        low = ln.msg.lower()
        if ln.engine_hint or "vllm" in low or "sglang" in low:
            self._engine_files.add(f)
            return False
        return True

    def _new_attempt(self, no: int) -> list[LogEvent]:
        self._old_pids |= self._pids  # an earlier start's processes: their late lines are not this start's
        self._pids = set()
        old = self.state
        self.state = ParseState(
            engine=old.engine, lines=old.lines, last_time=old.last_time, attempt=old.attempt + 1, attempt_line=no
        )
        self._context.clear()
        self._reset_attempt()
        return []

    # ------------------------------------------------------------------ input
    def feed(self, data: bytes) -> list[LogEvent]:
        """Feed raw bytes (any chunking); complete lines are parsed now."""
        if self._decoder is None:
            self._head += data
            if might_be_bom(self._head):
                return []  # one to three bytes that may yet be a BOM
            return self._start_decoding()
        if self.state.unreadable:
            return []
        return self._text_in(self._decoder.decode(data))

    def _start_decoding(self) -> list[LogEvent]:
        """A BOM decides the encoding, else UTF-8."""
        head, self._head = self._head, b""
        codec, skip = sniff(head[:4])
        self._codec = codec
        self._decoder = codecs.getincrementaldecoder(codec)(errors="replace")
        return self._text_in(self._decoder.decode(head[skip:]))

    def _text_in(self, text: str) -> list[LogEvent]:
        """Decoded text: the first SNIFF_CHARS are also judged text or not (once they are all in, or
        at a flush), so the verdict never depends on how the bytes were chunked."""
        if self._sample is not None:
            self._sample += text[: SNIFF_CHARS - len(self._sample)]
            if len(self._sample) >= SNIFF_CHARS:
                self._judge()
                if self.state.unreadable:
                    return []
        return self.feed_text(text)

    @property
    def judged(self) -> bool:
        """The start of the input has been judged text or not (:attr:`ParseState.unreadable`)."""
        return self._sample is None

    def _judge(self) -> None:
        if self._sample is not None:
            why = not_text(self._sample, self._codec)
            self._sample = None
            if why is not None:
                self.state.unreadable = why

    def feed_text(self, text: str) -> list[LogEvent]:
        if not text:
            return []
        buf = self._buf + text
        events: list[LogEvent] = []
        if "\n" in text:
            lines = buf.split("\n")
            buf = lines.pop()  # partial tail ('' when the text ended on a line break)
            for line in lines:
                if "\r" in line:
                    segs = line.split("\r")
                    if segs[-1] == "":
                        segs.pop()  # CRLF, or a redraw ending the line
                    for s in segs:
                        self._segment(s, True, events)
                else:
                    self._segment(line, self._seg > 0, events)
                self._phys += 1
                self._seg = 0
        if "\r" in buf:
            segs = buf.split("\r")
            buf = segs.pop()
            for s in segs:
                self._segment(s, True, events)
        if len(buf) > MAX_LINE:
            buf = buf[:MAX_LINE]
        self._buf = buf
        return events

    def _segment(self, s: str, multi: bool, events: list[LogEvent]) -> None:
        idx = self._seg
        self._seg += 1
        if not s:
            return
        no = self._phys + 1
        fl = self._flushed
        if fl is not None:
            self._flushed = None
            if fl == (no, idx, s):
                return  # parsed by flush() already, and unchanged since
        self._cur_line = no
        self._cur_seg = idx + 1 if multi else None
        events.extend(self.feed_line(s))

    def flush(self, *, everything: bool = False) -> list[LogEvent]:
        """Parse the unterminated tail now (call after ~1 s of silence): a progress bar
        that redraws without a line break. Other half-written lines wait for their end
        (or for :meth:`finish`), so a pause mid-line cannot cut an exception line.
        The tail is not parsed a second time when its line ends unchanged."""
        early = self._start_decoding() if self._decoder is None else []
        self._judge()
        if self.state.unreadable:
            return []
        assert self._decoder is not None
        tail = self._buf + self._decoder.decode(b"", final=False)
        self._buf = tail
        key = (self._phys + 1, self._seg, tail)
        if not tail or key == self._flushed:
            return early
        if not everything and "%|" not in tail and "% Completed" not in tail:
            return early
        self._flushed = key
        self._cur_line = self._phys + 1
        self._cur_seg = self._seg + 1 if self._seg else None
        return early + self.feed_line(tail)

    def finish(self) -> list[LogEvent]:
        """End of input: parse the tail and reset the buffer. An exception the log ends on, with no
        progress after it and no ready line, ended the engine: it is the failure."""
        early = self._start_decoding() if self._decoder is None else []
        self._judge()
        if self.state.unreadable:
            return []
        assert self._decoder is not None
        self._buf += self._decoder.decode(b"", final=True)
        ev = early + self.flush(everything=True)
        self._buf = ""
        self._flushed = None
        if self._seg or ev:
            self._phys += 1
            self._seg = 0
        self._confirm_at_end()
        return ev

    def ended(self) -> list[LogEvent]:
        """The log's writer is gone (its process ended): the unterminated last line counts, and an
        exception the log ends on (no progress after it, no ready line) ended the engine."""
        ev = self.flush(everything=True)
        self._confirm_at_end()
        return ev

    def _confirm_at_end(self) -> None:
        st = self.state
        if st.ready_line is None and any(e.provisional and e.line_no > self._progress_line for e in st.errors):
            st.errors = [
                replace(e, provisional=False) if e.provisional and e.line_no > self._progress_line else e
                for e in st.errors
            ]

    def feed_line(self, raw: str) -> list[LogEvent]:
        """Parse one segment of a physical line (no \\r or \\n inside)."""
        if "]" in raw and "[" in raw and GLUED_RE.search(raw):
            out: list[LogEvent] = []
            for piece in GLUED_RE.split(raw):
                if piece:
                    out.extend(self._line(piece))
            return out
        return self._line(raw)

    # ------------------------------------------------------------------ core
    def _line(self, raw: str) -> list[LogEvent]:
        no = self._cur_line
        seg = self._cur_seg
        if self.state.lines < no:
            self.state.lines = no
        if no == 1 and raw.startswith("# source: "):
            return []  # the provenance header of a stored reference log
        if raw.startswith("==> ") and raw.endswith(" <=="):
            self._tail_file = raw[4:-4]  # tail's header: the lines below come from this file
            return []
        ln = clean_line(raw)
        msg = ln.msg
        if self._other_program(ln):
            return []
        events: list[LogEvent] = []
        # a new server start in the same log: the latest attempt decides
        if ("server_args=" in msg and not ln.rank) or (("args" in msg or "version" in msg) and VL_ATTEMPT.search(msg)):
            st0 = self.state
            if st0.errors or st0.ready_line is not None or (st0.phase is not None and PHASE_INDEX[st0.phase] > 0):
                self._new_attempt(no)
        if ln.pid is not None:
            self._pids.add(ln.pid)
        st = self.state
        if ln.time:
            st.last_time = ln.time
        self._vote(ln)

        self._ln, self._events, self._no, self._segno = ln, events, no, seg
        phase, fact = self.phase, self.fact

        if st.phase is None and msg.strip():
            phase("process-start")

        # --- tracebacks: the root exception line of each process's chain
        if self._traceback(ln, msg, no, seg, events):
            self._context.append(ln.text)
            return events  # a frame is code, not a message
        # --- runtime stat lines (most of a serving log): never a fatal text nor a start-up line
        if "throughput" in msg and self._stats(msg, ln, no, events):
            self._context.append(ln.text)
            return events
        # --- fatal texts (cheap pre-filter)
        if might_be_fatal(msg) and self._fatal_message(ln, msg, no, seg, events):
            pass
        elif ("Error" in msg or "Exception" in msg) and not msg[:1].isspace():
            self._bare_exception(ln, msg.strip(), no, seg, events)
        elif RAY_PG_WAIT.search(msg) if "lacement" in msg or "resource" in msg or "no GPU" in msg else False:
            self._ray_wait = ln.text.strip()
        # --- progress bars and start-up lines
        if "%|" in msg or "% Completed |" in msg:
            self._bar(msg, ln, no, phase, events)
        elif "Capture" in msg or "Capturing" in msg or "Graph capturing" in msg:
            self._graph_lines(msg, phase, fact)
        self._rules.run(self, msg, ln)

        self._context.append(ln.text)
        return events

    def _recovered(self) -> None:
        """The engine came up (ready line) or serves (stat lines): a generic traceback seen
        before it was not fatal, nor a request's traceback after ready. One the engine said it
        went down with stays: progress of one rank proves nothing, other ranks go on for a while
        after the first one died."""
        st = self.state

        def survived(e: ErrorEvent) -> bool:
            return (
                e.origin == "exception" and (e.kind == "crash" or e.provisional) and e.line_no not in self._fatal_lines
            )

        if any(survived(e) for e in st.errors):
            st.errors = [e for e in st.errors if not survived(e)]
            for tb in self._tbs.values():
                tb.err_index = None

    def _add_error(self, err: ErrorEvent, events: list[LogEvent]) -> int | None:
        st = self.state
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
        st = self.state
        port = st.port if st.http_url or st.declared_port is not None else None  # known, not a default
        if m is not None and port is not None:
            return int(m.group(1)) != port
        return self._foreign_uvicorn

    def _bare_exception(self, ln: LogLine, text: str, no: int, seg: int | None, events: list[LogEvent]) -> None:
        """An exception line outside any traceback we saw begin (an excerpt pasted from the middle of
        one, or a process that prints only the last line): it is the failure once the engine dies
        after it (a wrapper, a signal, the file's end with no progress since); until then provisional."""
        m = EXC_LINE_RE.match(text) or TB_EXC_LINE_RE.match(text)
        if m is None or not m.group(1).endswith(("Error", "Exception")):
            return
        st = self.state
        err = ErrorEvent(
            "crash",
            exc_cause(text),
            ln.text.strip(),
            ln.time or st.last_time,
            no,
            tuple(self._context),
            segment=seg,
            origin="exception",
            rank=ln.rank,
            attempt=st.attempt,
            provisional=True,
        )
        self._add_error(err, events)

    def _fatal_message(self, ln: LogLine, msg: str, no: int, seg: int | None, events: list[LogEvent]) -> bool:
        """A fatal text outside a traceback; True when ``msg`` is one."""
        c = classify(msg)
        if c is None:
            return False
        kind, cause = c
        text = msg.strip()
        if kind == "port" and ln.engine_hint is None and self._foreign_port(text):
            return True  # another program's server could not bind its own port
        if kind == "crash" and self._stopping:
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
            for i, e in enumerate(self.state.errors):
                if e.origin == "exception" and e.wrapper is None:
                    self.state.errors[i] = replace(e, wrapper=text)
        ctx = tuple(self._context)
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
            attempt=self.state.attempt,
        )
        self._add_error(err, events)
        return True

    def _traceback(self, ln: LogLine, msg: str, no: int, seg: int | None, events: list[LogEvent]) -> bool:
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
        st = self.state
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
                tuple(self._context),
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
            idx = self._add_error(err, events)
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
    def _vote(self, ln: LogLine) -> None:
        if self._engine_fixed:
            return
        m = ln.msg
        if ln.engine_hint:
            self._votes[ln.engine_hint] += 1
        if "sglang" in m or "server_args=" in m or sglang.SG_READY in m or "sgl_kernel" in m:
            self._votes["sglang"] += 3
        if "vllm" in m.lower() or "EngineCore" in ln.text:
            self._votes["vllm"] += 3
        sg, vl = self._votes["sglang"], self._votes["vllm"]
        if sg or vl:
            self.state.engine = "sglang" if sg >= vl else "vllm"

    def _bar(self, msg: str, ln: LogLine, no: int, phase: Callable[..., None], events: list[LogEvent]) -> None:
        st = self.state
        m = SHARDS.search(msg)
        if m:
            n, total = int(m.group(3)), int(m.group(4))
            prev = st.weights
            st.weights = (n, total)
            if n == total and prev != (n, total):
                st.weight_bars.append((n, total))
            self._progress("weight-loading", "weights", n, total, phase)
            return
        m = VL_GRAPH_PROG.search(msg)
        if m:
            self._graph_progress(m.group(1) or "", int(m.group(3)), int(m.group(4)), phase)
            return
        m = SG_GRAPH_PROG.search(msg)
        if m:
            label = (
                st.graph_label
                if st.graph_label not in (None, "")
                else ("decode" if m.group(1) == "batches" else "prefill")
            )
            self._graph_progress(label, int(m.group(5)), int(m.group(6)), phase)
            return
        if not self._sg_capture_open or st.engine == "vllm":
            return  # a bare bar outside SGLang's capture begin/end is someone else's
        m = TQDM.search(msg)
        if m and st.phase == "graph-capture":
            head = msg[: m.start()].strip()
            if not head:
                # a bare bar between "Capture … graph begin" and its end (the first frame, or old SGLang)
                self._graph_progress(st.graph_label or "", int(m.group(2)), int(m.group(3)), phase)

    def _progress(self, p: str, label: str, n: int, total: int, phase: Callable[..., None]) -> None:
        key = (p, label, n, total)
        if key == self._last_progress:
            return  # the 100% frame appears twice; the last one wins silently
        self._last_progress = key
        phase(p, n / total if total else None, n=n, total=total, label=label)

    def _graph_progress(self, label: str, n: int, total: int, phase: Callable[..., None]) -> None:
        st = self.state
        st.graph_seen = True
        if label != st.graph_label or (st.graph is not None and (total != st.graph[1] or n < st.graph[0])):
            st.graph_done = False
        st.graph_label = label
        st.graph = (n, total)
        if n == total:
            bar = (label, n, total)
            if not st.graph_bars or st.graph_bars[-1] != bar:
                st.graph_bars.append(bar)
        else:
            st.graph_done = False
        self._progress("graph-capture", label, n, total, phase)

    def _graph_lines(self, msg: str, phase: Callable[..., None], fact: Callable[[str, object], None]) -> None:
        st = self.state
        m = SG_GRAPH_BEGIN.search(msg)
        if m:
            label = m.group(1) or ""
            self._sg_capture_open = True
            if st.phase != "graph-capture" or st.graph_label != label or st.graph_done:
                st.graph_label = label
                st.graph = None
                st.graph_done = False
                st.graph_seen = True
                phase("graph-capture", 0.0, label=label)
            return
        m = SG_GRAPH_END.search(msg)
        if m:
            st.graph_seen = True
            self._sg_capture_open = False
            if not st.graph_done or st.phase != "graph-capture":
                st.graph_done = True
                label = m.group(1) or st.graph_label or ""
                phase("graph-capture", 1.0, label=label, done=True)
                if m.group(2):
                    fact("graph_seconds", float(m.group(2)))
            return
        if st.engine != "sglang" and VL_GRAPH_BEGIN.search(msg):
            if st.phase != "graph-capture":
                st.graph_seen = True
                phase("graph-capture", 0.0)
            return
        m = VL_GRAPH_DONE.search(msg)
        if m:
            st.graph_seen = True
            if not st.graph_done:
                st.graph_done = True
                phase("graph-capture", 1.0, label=st.graph_label or "", done=True)
                fact("graph_seconds", float(m.group(1)))
                if m.group(2):
                    fact("graph_mem_gb", float(m.group(2)))

    # ------------------------------------------------------------------ what lines mean (the rule tables call these)
    def phase(self, p: str, progress: float | None = None, **kw: object) -> None:
        """The startup moved to phase ``p`` (or made progress in it); phases only move forward."""
        st = self.state
        cur = st.phase
        if cur is not None and PHASE_INDEX[p] < PHASE_INDEX[cur]:
            return  # phases only move forward (other ranks lag behind)
        if cur == p and progress is None and not kw.get("done"):
            return
        if p == "ready":
            self._recovered()
        st.phase = p
        self._progress_line = self._no
        ln = self._ln
        self._events.append(
            PhaseEvent(p, progress, ln.msg.strip() or ln.text, ln.time, self._no, segment=self._segno, **kw)  # type: ignore[arg-type]
        )

    def fact(self, name: str, value: object) -> None:
        """A fact the log states; (all)-rank lines keep the first value, an explicit rank 0 replaces one
        from another rank."""
        st = self.state
        ln = self._ln
        prev_rank = self._fact_rank.get(name)
        if (
            name not in st.facts
            or name not in _RANKED_FACTS
            or (prev_rank is not None and not _rank_zero(prev_rank) and _rank_zero(ln.rank))
        ):
            st.facts[name] = value
            self._fact_rank[name] = ln.rank
        self._events.append(FactEvent(name, value, ln.msg.strip(), ln.time, self._no, ln.rank, segment=self._segno))

    def weights_loaded(self) -> None:
        if not self.state.weights_done:
            self.state.weights_done = True
            self.phase("weight-loading", 1.0, done=True, label="weights")

    def ready(self, ln: LogLine) -> None:
        self.state.ready_line = ln.text.strip()
        self.phase("ready", 1.0)

    def server_up(self) -> None:
        """The engine's own HTTP server has started (its routes or its start line)."""
        self._server_up = True

    def server_url(self, url: str, *, announced: bool) -> None:
        st = self.state
        if announced:
            self._server_up = True
        st.http_url = url
        self.fact("http_url", url)
        self.phase("warmup")

    def declare_port(self, port: int) -> None:
        """The port the engine's arguments ask for."""
        self.state.declared_port = port

    def own_server_line(self, ln: LogLine) -> bool:
        """A uvicorn line ("Application startup complete.", "Uvicorn running on …") is the
        engine's when it carries the engine's prefix, or, bare, when it follows the engine's
        own server start (or its loaded KV cache) and no other program's uvicorn block."""
        if ln.engine_hint == "vllm" and ln.pid is not None:
            return True
        if self._foreign_uvicorn:
            return False
        st = self.state
        if ln.engine_hint == "sglang":
            return True
        return self._server_up or st.kv_seen or st.graph_seen

    def _stats(self, msg: str, ln: LogLine, no: int, events: list[LogEvent]) -> bool:
        """A runtime stat line (the engine serves); True when ``msg`` is one."""
        ev: StatEvent | None = None
        if "Decode batch" in msg or "Prefill batch" in msg:
            if self.stats:
                vals: dict[str, float | int | None] = {}
                for name, rx in SG_STAT_FIELDS.items():
                    m = rx.search(msg)
                    if m:
                        g = next(x for x in m.groups() if x is not None)
                        vals[name] = int(g) if name in ("running", "queued") else float(g)
                kind = "decode" if "Decode batch" in msg else "prefill"
                ev = StatEvent("sglang", msg.strip(), ln.time, no, kind, **vals)  # type: ignore[arg-type]
        else:
            m = VL_STATS.search(msg)
            if not m:
                return False
            if self.stats:
                kv = VL_KV_USAGE.search(msg)
                hit = VL_PREFIX_HIT.search(msg)
                ev = StatEvent(
                    "vllm",
                    msg.strip(),
                    ln.time,
                    no,
                    "engine",
                    running=int(m.group(3)),
                    queued=int(m.group(4)),
                    prompt_throughput=float(m.group(1)),
                    gen_throughput=float(m.group(2)),
                    token_usage=float(kv.group(1)) / 100 if kv else None,
                    prefix_hit_rate=float(hit.group(1)) / 100 if hit else None,
                )
        self._recovered()
        self._progress_line = no
        if ev is not None:
            self.state.last_stat = ev
            events.append(ev)
        return True


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
_RULES = RuleTable(sglang.STARTUP + SHARED + vllm.STARTUP)


_URL_PORT = re.compile(r":(\d+)")
#: the port of a bind error ("bind on address ('0.0.0.0', 8000)")
_BIND_PORT = re.compile(r"\('[^']*', (\d+)\)")
_RANKED_FACTS = frozenset({"kv_tokens", "kv_size_gb", "weights_mem_gb", "kv_mem_gib", "graph_seconds", "graph_mem_gb"})


def _going_down(wrapper: str | None) -> bool:
    """The line that opened a traceback says the engine goes down with it ("Scheduler hit an exception")."""
    return wrapper is not None and WRAPPER_RE.search(wrapper) is not None


def _rank_zero(rank: str) -> bool:
    """True for the main process or rank 0 ('', 'TP0', 'Worker_TP0', 'EngineCore_DP0', 'VllmWorker0')."""
    return all(int(n) == 0 for n in re.findall(r"\d+", rank))


def parse_text(text: str, engine: str | None = None) -> tuple[ParseState, list[LogEvent]]:
    """Parse a whole log (a file's text) at once."""
    p = LogParser(engine)
    events = p.feed_text(text)
    events += p.finish()
    return p.state, events


def parse_file(path: str, engine: str | None = None) -> tuple[ParseState, list[LogEvent]]:
    p = LogParser(engine)
    events: list[LogEvent] = []
    with open(path, "rb") as f:
        while True:
            chunk = f.read(65536)
            if not chunk:
                break
            events += p.feed(chunk)
    events += p.finish()
    return p.state, events


def iter_events(chunks: Iterable[bytes], engine: str | None = None) -> Iterator[LogEvent]:
    p = LogParser(engine)
    for c in chunks:
        yield from p.feed(c)
    yield from p.finish()


def event_to_json(ev: LogEvent) -> dict[str, object]:
    """The ``parse-log --json`` shape: event, phase, progress (0..1 or null), time, message, kind …"""
    if isinstance(ev, PhaseEvent):
        d: dict[str, object] = {
            "event": "phase",
            "phase": ev.phase,
            "progress": None if ev.progress is None else round(ev.progress, 4),
            "time": ev.time,
            "message": ev.message,
            "line": ev.line_no,
        }
        if ev.segment:
            d["segment"] = ev.segment
        if ev.total is not None:
            d["n"], d["total"] = ev.n, ev.total
        if ev.label:
            d["label"] = ev.label
        if ev.done:
            d["done"] = True
        return d
    if isinstance(ev, FactEvent):
        return {
            "event": "fact",
            "name": ev.name,
            "value": ev.value,
            "time": ev.time,
            "message": ev.message,
            "line": ev.line_no,
        }
    if isinstance(ev, ErrorEvent):
        return {
            "event": "error",
            "kind": ev.kind,
            "cause": ev.cause,
            "phase": None,
            "progress": None,
            "time": ev.time,
            "message": ev.line,
            "line": ev.line_no,
            "segment": ev.segment,
            "origin": ev.origin,
            "wrapper": ev.wrapper,
            "attempt": ev.attempt,
            "context": list(ev.context[-5:]),
        }
    d = {k: getattr(ev, k) for k in ev.__dataclass_fields__}
    return d
