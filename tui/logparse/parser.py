"""The incremental parser: bytes in, :mod:`tunedeck.logparse.events` out."""

from __future__ import annotations

import codecs
import re
from collections import deque
from typing import Iterable, Iterator

from tunedeck.logparse import sglang, uvicorn, vllm
from tunedeck.logparse.bars import Bars
from tunedeck.logparse.decode import SNIFF_CHARS, might_be_bom, not_text, sniff
from tunedeck.logparse.events import (
    ENGINES,
    PHASE_INDEX,
    FactEvent,
    LogEvent,
    ParseState,
    PhaseEvent,
)
from tunedeck.logparse.failures import Failures
from tunedeck.logparse.patterns import (
    GLUED_RE,
    MAX_LINE,
    VL_ATTEMPT,
    LogLine,
    clean_line,
    clean_safe_line,
)
from tunedeck.logparse.rules import RuleTable

# --------------------------------------------------------------------------- parser


class LogParser:
    """Incremental parser. ``feed`` / ``feed_text`` / ``feed_line`` return the new events.

    Lines are counted as the file's physical lines (``\\n``); tqdm redraws joined
    by ``\\r`` are parsed one by one and numbered as segments of their line.

    A reader that already cuts the log into display lines (the run view's
    :class:`~tunedeck.hostops.logfollow.LineSplitter`: split, decoded, redacted and made safe once)
    hands the parser those segments instead (:meth:`feed_segment`, with :meth:`see` for the raw
    bytes and the unterminated tail passed to :meth:`flush` / :meth:`ended`): each byte is then
    processed once. The two inputs are not mixed in one parser."""

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
        self._ln = clean_safe_line("")
        self._events: list[LogEvent] = []
        self._no = 0
        self._segno: int | None = None
        self._reset_attempt()

    def _reset_attempt(self) -> None:
        self._failures = Failures(self)
        self._bars = Bars(self)
        self._fact_rank: dict[str, str] = {}
        self._server_up = False  # the engine's HTTP server start line was seen
        self._foreign_uvicorn = False  # bare uvicorn lines now come from another program
        self._uvicorn_pid: int | None = None  # the engine's uvicorn ("Started server process [N]")
        self._stopping = False  # the engine's server began an orderly shutdown after serving
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
        return self._text_in(self._open())

    def _open(self) -> str:
        """A BOM decides the encoding, else UTF-8: the first bytes held so far, decoded."""
        head, self._head = self._head, b""
        self._codec, skip = sniff(head[:4])
        self._decoder = codecs.getincrementaldecoder(self._codec)(errors="replace")
        return self._decoder.decode(head[skip:])

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

    # ------------------------------------------------------------------ input split by the caller
    def see(self, data: bytes) -> None:
        """The raw bytes of a log whose segments come through :meth:`feed_segment`: read only
        until the start of the log is judged text or not (as :meth:`feed` judges it)."""
        if self._sample is None:
            return
        if self._decoder is None:
            self._head += data
            if might_be_bom(self._head):
                return
            text = self._open()
        else:
            text = self._decoder.decode(data)
        self._sample += text[: SNIFF_CHARS - len(self._sample)]
        if len(self._sample) >= SNIFF_CHARS:
            self._judge()

    def feed_segment(self, text: str, cr: bool) -> list[LogEvent]:
        """One segment of a physical line, already decoded, redacted and made safe
        (``safe_line(redact_text(…))``): ``cr`` when a ``\\r`` ended it (a redraw: the line goes
        on), else it ends its line. The same events as :meth:`feed` of the raw bytes."""
        if self.state.unreadable:
            return []
        events: list[LogEvent] = []
        if cr:
            self._segment(text, True, events, safe=True)
        else:
            self._segment(text, self._seg > 0, events, safe=True)
            self._phys += 1
            self._seg = 0
        return events

    def _segment(self, s: str, multi: bool, events: list[LogEvent], *, safe: bool = False) -> None:
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
        events.extend(self.feed_line(s, safe=safe))

    def flush(self, *, everything: bool = False, tail: str | None = None) -> list[LogEvent]:
        """Parse the unterminated tail now (call after ~1 s of silence): a progress bar
        that redraws without a line break. Other half-written lines wait for their end
        (or for :meth:`finish`), so a pause mid-line cannot cut an exception line.
        The tail is not parsed a second time when its line ends unchanged.
        ``tail``: the segment being written, made safe, where :meth:`feed_segment` is the input."""
        safe = tail is not None
        early: list[LogEvent] = []
        if tail is None:
            early = self._start_decoding() if self._decoder is None else []
        self._judge()
        if self.state.unreadable:
            return []
        if tail is None:
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
        return early + self.feed_line(tail, safe=safe)

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
        self._failures.confirm_at_end(self._progress_line)
        return ev

    def ended(self, *, tail: str | None = None) -> list[LogEvent]:
        """The log's writer is gone (its process ended): the unterminated last line counts, and an
        exception the log ends on (no progress after it, no ready line) ended the engine.
        ``tail`` as for :meth:`flush`."""
        ev = self.flush(everything=True, tail=tail)
        self._failures.confirm_at_end(self._progress_line)
        return ev

    def feed_line(self, raw: str, *, safe: bool = False) -> list[LogEvent]:
        """Parse one segment of a physical line (no \\r or \\n inside); ``safe``: it is already
        redacted and made safe (:func:`~tunedeck.logparse.patterns.clean_safe_line`)."""
        if "][" in raw and GLUED_RE.search(raw):  # (every match is between a "]" and a "[")
            out: list[LogEvent] = []
            for piece in GLUED_RE.split(raw):
                if piece:
                    out.extend(self._line(piece, safe))
            return out
        return self._line(raw, safe)

    # ------------------------------------------------------------------ core
    def _line(self, raw: str, safe: bool = False) -> list[LogEvent]:
        no = self._cur_line
        seg = self._cur_seg
        if self.state.lines < no:
            self.state.lines = no
        if no == 1 and raw.startswith("# source: "):
            return []  # the provenance header of a stored reference log
        if raw.startswith("==> ") and raw.endswith(" <=="):
            self._tail_file = raw[4:-4]  # tail's header: the lines below come from this file
            return []
        ln = clean_safe_line(raw) if safe else clean_line(raw)
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

        if st.phase is None and msg.strip():
            self.phase("process-start")

        # --- tracebacks: the root exception line of each process's chain
        if self._failures.traceback(ln, msg, no, seg, events):
            self._context.append(ln.text)
            return events  # a frame is code, not a message
        # --- runtime stat lines (most of a serving log): never a fatal text nor a start-up line
        if "throughput" in msg and self._stats(msg, ln, no, events):
            self._context.append(ln.text)
            return events
        # --- fatal texts, exception lines
        self._failures.line(ln, msg, no, seg, events)
        # --- progress bars and start-up lines
        if "%|" in msg or "% Completed |" in msg:
            self._bars.bar(msg)
        elif "Capture" in msg or "Capturing" in msg or "Graph capturing" in msg:
            self._bars.graph_lines(msg)
        self._rules.run(self, msg, ln)

        self._context.append(ln.text)
        return events

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
            self._failures.recovered()
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

    def kv_cache(self, tokens: int | None = None) -> None:
        """A line of the KV cache's set-up: the phase, and its size in ``tokens`` when it is the first
        size the log gives."""
        st = self.state
        st.kv_seen = True
        if tokens is not None and st.kv_tokens is None:
            st.kv_tokens = tokens
        self.phase("kv-cache")

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
        sglang_stat = "Decode batch" in msg or "Prefill batch" in msg
        if not self.stats:
            if not (sglang_stat or vllm.is_stat(msg)):
                return False
            ev = None
        else:
            ev = sglang.stat_event(msg, ln, no) if sglang_stat else vllm.stat_event(msg, ln, no)
            if ev is None:
                return False
        self._failures.recovered()
        self._progress_line = no
        if ev is not None:
            self.state.last_stat = ev
            events.append(ev)
        return True


_RULES = RuleTable(sglang.STARTUP + uvicorn.SHARED + vllm.STARTUP)


_RANKED_FACTS = frozenset({"kv_tokens", "kv_size_gb", "weights_mem_gb", "kv_mem_gib", "graph_seconds", "graph_mem_gb"})


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
