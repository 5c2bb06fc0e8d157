"""A run's log, read or followed from a byte offset: no byte lost or repeated across a lost link."""

from __future__ import annotations

import asyncio
import codecs
import logging
import time
from typing import AsyncGenerator, Callable

from tunedeck.hostops import liveness
from tunedeck.hostops.hosts import STREAM_READ_BYTES, ByteStream, Host, HostError, target_name
from tunedeck.hostops.hostscripts import FOLLOW_SCRIPT
from tunedeck.hostops.runstore import RunStore
from tunedeck.util import retry
from tunedeck.util.aio import cancel_and_wait, within
from tunedeck.util.safety import check_text, redact_text, safe_line

_log = logging.getLogger(__name__)

#: The most of one log line shown (and kept): a longer line is cut there, marked with the
#: number of bytes cut, and the rest of it is only counted.
LINE_CAP = 16 * 1024


#: Bytes held beyond :data:`LINE_CAP` so that a secret argument straddling the cut is redacted
#: whole before the line is cut (a key cut to ``none…`` or ``null…`` would read as no key)
REDACT_MARGIN = 1024
#: Chunks read ahead of the one being shown (each up to 64 KiB): when lines come faster than
#: they are parsed and shown, the reader waits and the log file is the buffer, not this process
READ_AHEAD = 16
#: Seconds the reader waits after a small chunk before it reads again: what comes meanwhile waits
#: in the stream's buffer and comes as one chunk. A server that flushes every 10 ms made each of its
#: 100 chunks a second pass reader, queue, follower and every consumer; a view shows it no later
#: (it draws every 100 ms at best), and after a full chunk (``STREAM_READ_BYTES``) it reads at once
GATHER_S = 0.1


#: what a follower of a log says once the host answers again after a lost link
LINK_BACK_TEXT = "log link back; following again"


def link_lost_text(e: BaseException, attempt: int) -> str:
    """What a follower of a log says on a failed attempt (``follow_forever``'s ``on_error``)."""
    return f"log link lost ({e}); reconnecting (attempt {attempt})"


def cut_mark(n: int) -> str:
    """What ends a line cut at :data:`LINE_CAP` (``n``: the bytes cut)."""
    return f" … {n} bytes cut"


def _head(data: bytes, cap: int) -> bytes:
    """``data`` cut to at most ``cap`` bytes, not inside a UTF-8 character."""
    if len(data) <= cap:
        return data
    end = cap
    while end > 0 and cap - end < 3 and data[end] & 0xC0 == 0x80:
        end -= 1
    return data[:end]


class LineSplitter:
    """Log bytes → display lines, in bounded memory.

    Each line is decoded as UTF-8 (invalid bytes replaced; a UTF-8 BOM that begins the stream
    dropped), a ``\\r`` redraw keeps its last frame, the secret arguments an engine echoes are
    redacted (:func:`redact_text`) and the host's escape sequences removed (:func:`safe_line`; SGR
    colour kept only with ``sgr=True``). A line longer than ``cap`` bytes is cut there and marked
    (:func:`cut_mark`), after its redaction (of ``cap`` + :data:`REDACT_MARGIN` bytes: a secret
    across the cut is hidden whole): however long a line (or an unterminated one) grows, at most
    ``cap`` + that margin bytes of it are held.

    ``segments``: told every segment as it ends, made safe like a line (without colour or cut
    mark): each ``\\r`` frame (``cr=True``) and the part that ends its line (``cr=False``, also
    when blank). The startup tracker parses these (:meth:`~tunedeck.logparse.LogParser.feed_segment`),
    so a log that is shown and tracked is split, decoded, redacted and made safe once.
    """

    def __init__(
        self, *, cap: int = LINE_CAP, sgr: bool = False, segments: Callable[[str, bool], object] | None = None
    ) -> None:
        self.cap = cap
        self.hold = cap + REDACT_MARGIN
        self.sgr = sgr
        self.segments = segments
        self._head = bytearray()  # the current line, at most ``hold`` bytes (its last \r frames)
        self._frame = 0  # where the frame being written (after the line's last \r) starts in _head
        self._received = 0  # bytes of the current line received
        self._cut = 0  # bytes of the current line cut at the cap
        self._bom = True  # the stream's first bytes, which may be a UTF-8 BOM, are not yet all in

    def feed(self, data: bytes) -> list[str]:
        return [line for line, _ in self.feed_sized(data)]

    def feed_sized(self, data: bytes) -> list[tuple[str, int]]:
        """The complete lines in ``data``, each with its length in the log (its newline included)."""
        out: list[tuple[str, int]] = []
        start = 0
        while True:
            i = data.find(b"\n", start)
            if i < 0:
                self._add(data[start:])
                return out
            part = data[start:i]
            if self._received or self._bom or b"\r" in part or len(part) > self.hold:
                self._add(part)
                out.append((self._end_line(), self._received + 1))
                self._reset()
            else:  # a whole line in this chunk, no redraw (most lines): nothing to hold
                out.append((self._one_frame(part, 0), len(part) + 1))
            start = i + 1

    def _add(self, part: bytes) -> None:
        if not part:
            return
        self._received += len(part)
        if self._cut:
            self._cut += len(part)
            return
        head = self._head
        head += part
        if self._bom and len(head) >= len(codecs.BOM_UTF8):
            self._bom = False
            if head.startswith(codecs.BOM_UTF8):
                del head[: len(codecs.BOM_UTF8)]
        if b"\r" in part:
            # a redraw: only the last non-blank complete frame and the one being drawn matter
            j = head.rfind(b"\r")
            if self.segments is not None:
                for f in bytes(head[self._frame : j]).split(b"\r"):  # the frames this part ended
                    self.segments(self._segment(f), True)
            frames = [f for f in bytes(head[:j]).split(b"\r") if f.strip()]
            kept = frames[-1] if frames else b""
            head[:j] = kept
            self._frame = len(kept) + 1
        if len(head) > self.hold:
            keep = _head(bytes(head), self.hold)
            self._cut = len(head) - len(keep)
            del head[len(keep) :]

    def _reset(self) -> None:
        self._head.clear()
        self._frame = 0
        self._received = 0
        self._cut = 0
        self._bom = False

    def _end_line(self) -> str:
        """The current line as shown; :attr:`segments` is told its last segment."""
        if not self._frame:
            return self._one_frame(bytes(self._head), self._cut)
        if self.segments is not None:
            self.segments(self._segment(bytes(self._head[self._frame :])), False)
        return self._finish()

    def _one_frame(self, data: bytes, cut: int) -> str:
        """A line without a redraw (``cut`` bytes of it already cut) as shown; it is its one
        segment, made safe once for the view and :attr:`segments`."""
        text, cut = self._safe(data.decode("utf-8", "replace"), cut)
        if self.segments is not None:
            self.segments(text if not self.sgr else safe_line(text), False)
        return text + cut_mark(cut) if cut else text

    def _segment(self, frame: bytes) -> str:
        """One ``\\r`` frame (or a line's last part) made safe, as :attr:`segments` is told it."""
        text = self._safe(frame.decode("utf-8", "replace"), 0)[0]
        return text if not self.sgr else safe_line(text)

    def _safe(self, text: str, cut: int) -> tuple[str, int]:
        """``text`` (one frame, ``cut`` bytes of it already cut) redacted, cut at the cap and made
        safe; with the bytes cut in all."""
        data = redact_text(text).encode("utf-8")  # redacted first, then cut
        if len(data) > self.cap:
            keep = _head(data, self.cap)
            cut += len(data) - len(keep)
            data = keep
        return safe_line(data.decode("utf-8", "replace"), sgr=self.sgr), cut

    def _finish(self) -> str:
        text = bytes(self._head).decode("utf-8", "replace").rstrip("\r")
        if "\r" in text:
            frames = [f for f in text.split("\r") if f.strip()]
            text = frames[-1] if frames else ""
        line, cut = self._safe(text, self._cut)
        return line + cut_mark(cut) if cut else line

    def partial(self) -> str:
        """The unterminated tail as it would look now (last \r frame)."""
        return self._finish() if self._received else ""

    def tail(self) -> str:
        """The segment being written (after the line's last ``\\r``) as :attr:`segments` would
        be told it: what a parser reads of a line not yet ended (a progress bar)."""
        return self._segment(bytes(self._head[self._frame :])) if self._received else ""

    def pending_bytes(self) -> int:
        """Bytes received but not yet shown (an unterminated line)."""
        return self._received

    def cut_short(self, chunk: bytes) -> bool:
        """The unterminated line is only the end of ``chunk`` (the last bytes fed), not redrawn:
        a line the read cut, which the next read most likely ends."""
        return 0 < self._received == len(chunk) - 1 - chunk.rfind(b"\n") and not self._frame

    def flush(self) -> list[str]:
        if not self._received:
            return []
        line = self._end_line()
        self._reset()
        return [line]


class LogFollower:
    """Follow a run's log from a byte offset: ``echo $$; exec tail -c +N -F log``.

    Iterate for byte chunks; :attr:`offset` is the number of log bytes consumed.
    After a lost connection, create a new follower from :attr:`offset` (or call
    :meth:`chunks` again): no byte is lost or repeated. With ``persist=True`` the
    offset is saved in the run record (throttled, and on close).
    """

    def __init__(
        self,
        host: Host,
        log_path: str,
        offset: int = 0,
        *,
        run_id: str | None = None,
        store: RunStore | None = None,
        persist: bool = False,
        persist_every: float = 0.25,
    ) -> None:
        check_text(log_path, "log path")
        self.host = host
        self.log_path = log_path
        self.offset = int(offset)
        self.run_id = run_id
        self.store = store or (RunStore() if persist else None)
        self.persist = persist and run_id is not None
        self.persist_every = persist_every
        self.remote_pid: int | None = None
        #: the host side answered (its first line, the pid, arrived): the link carries this follow
        self.answered = False
        self.beat = liveness.HEARTBEAT_S
        self.dead_after = liveness.dead_after(self.beat)
        self.silent_for = 0.0
        self._stream: ByteStream | None = None
        self._saved = self.offset
        self._last_save = 0.0

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The log's bytes from :attr:`offset` on, under the liveness rule
        (:mod:`tunedeck.hostops.liveness`): the host side beats on stderr and ends itself once the
        laptop's beats stop; ``HostError('connection-lost')`` once the host side has been
        silent for :func:`~tunedeck.hostops.liveness.dead_after` seconds."""
        beat = liveness.interval()
        dead = liveness.dead_after(beat)
        argv = [
            "/bin/sh",
            "-c",
            FOLLOW_SCRIPT,
            "sh",
            str(self.offset + 1),
            self.log_path,
            f"{beat:g}",
            f"{dead:g}",
        ]
        stream = self.host.stream(argv, heartbeat=beat)
        self._stream = stream
        self.beat, self.dead_after, self.silent_for = beat, dead, 0.0
        watch: asyncio.Task[None] | None = None
        head = b""
        got_pid = False

        async def watchdog() -> None:
            while True:
                await asyncio.sleep(min(1.0, beat / 2))
                if self.check_alive() is not None:
                    await stream.aclose()
                    return

        try:
            async with stream:
                async for chunk in stream:
                    if watch is None:
                        watch = asyncio.ensure_future(watchdog())
                    if not got_pid:
                        head += chunk
                        if b"\n" not in head:
                            continue
                        first, chunk = head.split(b"\n", 1)
                        got_pid = True
                        self.answered = True
                        self.remote_pid = int(first) if first.strip().isdigit() else None
                        if not chunk:
                            continue
                    self._maybe_save()
                    self.offset += len(chunk)
                    yield chunk
            if self.silent_for:
                raise HostError(
                    "connection-lost",
                    f"following {self.log_path}: no heartbeat from the host for {self.silent_for:.0f} s",
                    target=target_name(self.host),
                )
        finally:
            # Closing the stream (above) already ended the remote tail, or, when the link is
            # gone, queued it to be killed once the host reconnects (SshHost reaps stale streams,
            # guarded by start time); its own watchdog ends it sooner (no heartbeat on stdin).
            # Killing it here would reconnect, with retries, before the lost link reaches the
            # caller: a dead link must be reported first.
            if watch is not None:
                await cancel_and_wait([watch], f"heartbeat watch of {self.log_path}")
            self._stream = None
            self.save()

    def check_alive(self) -> HostError | None:
        """``None`` while the stream lives by the liveness rule; once the host side has been
        silent for longer than :attr:`dead_after`, the link is declared dead (an SSH stream drops
        its connection) and the error to report is returned."""
        stream = self._stream
        if stream is None or not stream.last_heard:
            return None
        quiet = time.monotonic() - stream.last_heard
        if quiet <= self.dead_after:
            return None
        self.silent_for = quiet
        reason = f"following {self.log_path}: no heartbeat from the host for {quiet:.0f} s (one every {self.beat:g} s)"
        stream.link_dead(reason)
        return HostError("connection-lost", reason, target=target_name(self.host))

    def _maybe_save(self) -> None:
        if self.persist and self.offset != self._saved and time.monotonic() - self._last_save >= self.persist_every:
            self.save()

    def save(self) -> None:
        if not self.persist or self.store is None or self.run_id is None or self.offset == self._saved:
            return
        self.store.update(self.run_id, log_offset=self.offset)
        self._saved = self.offset
        self._last_save = time.monotonic()

    async def close(self) -> None:
        s = self._stream
        if s is not None:
            await s.aclose()


async def follow_forever(
    host: Host,
    log_path: str,
    offset: int,
    on_chunk: Callable[[bytes], None],
    stop: asyncio.Event,
    *,
    idle: float = 1.0,
    on_idle: Callable[[], object] | None = None,
    on_error: Callable[[Exception, int], None] | None = None,
    on_resume: Callable[[], None] | None = None,
    run_id: str | None = None,
    store: RunStore | None = None,
    persist: bool = False,
) -> int:
    """Follow ``log_path`` from ``offset`` until ``stop`` is set, reconnecting with
    backoff after a lost link (resuming at the consumed offset, so nothing is lost or
    repeated). ``on_idle`` runs after every ``idle`` seconds without data. Returns the offset.

    A quiet file is not a lost link: the stream is read by its own task, and this loop only
    waits on what that task hands over, so no timer ever cancels a read. A link is lost when
    the stream fails in any way (an exception of any kind, or its end: ``tail -F`` never ends
    on its own), including the liveness rule's silence; ``on_error`` is told, and the follow
    resumes. ``on_resume`` is told once the host answers again after a lost link (within one
    ``idle`` tick of its answer, whether or not the file has grown). An exception raised by
    ``on_chunk`` is the caller's and propagates."""
    backoff = retry.Backoff(0.5, 10.0)
    attempt = 0
    lost = False
    while not stop.is_set():
        f = LogFollower(host, log_path, offset, run_id=run_id, store=store, persist=persist)
        q: asyncio.Queue[bytes | Exception | None] = asyncio.Queue(READ_AHEAD)
        reader = asyncio.ensure_future(_pump(f, q))
        try:
            while not stop.is_set():
                try:
                    item = await within(q.get(), idle)
                except asyncio.TimeoutError:
                    if on_idle is not None:
                        on_idle()
                    dead = f.check_alive()
                    if dead is not None:
                        raise dead from None
                    if lost and f.answered:
                        lost = False
                        if on_resume is not None:
                            on_resume()
                    continue
                if item is None:
                    raise HostError(
                        "connection-lost", f"following {log_path}: the stream ended", target=target_name(host)
                    )
                if isinstance(item, Exception):
                    raise item
                if lost:  # a chunk came: the host answered (its pid line came first)
                    lost = False
                    if on_resume is not None:
                        on_resume()
                on_chunk(item)
                offset += len(item)
                backoff.reset()
                attempt = 0
        except Exception as e:  # noqa: BLE001 - any failure of the stream is a lost link: told, resumed
            if not isinstance(e, (HostError, OSError)):
                _log.warning("following %s: %s: %s; reconnecting", log_path, type(e).__name__, e, exc_info=True)
            attempt += 1
            lost = True
            if on_error is not None:
                on_error(e, attempt)
        finally:
            await cancel_and_wait([reader], f"follow of {log_path}")
        if not stop.is_set():
            try:
                await within(stop.wait(), backoff.next())
            except asyncio.TimeoutError:
                pass
    return offset


async def _pump(f: LogFollower, q: "asyncio.Queue[bytes | Exception | None]") -> None:
    """Hand ``f``'s chunks to ``q``, then ``None`` at its end or the exception it failed with."""
    it = f.chunks()
    try:
        try:
            async for chunk in it:
                await q.put(chunk)
                if len(chunk) < STREAM_READ_BYTES:
                    await asyncio.sleep(GATHER_S)
        finally:
            await it.aclose()  # ends the stream now, also when cancelled (contextlib.aclosing is 3.10+)
    except Exception as e:  # noqa: BLE001 - handed to the follower, which reports and reconnects
        await q.put(e)
    else:
        await q.put(None)


async def read_log(host: Host, log_path: str, offset: int = 0, limit: int | None = None) -> bytes:
    """The log from ``offset`` (at most ``limit`` bytes), byte for byte as the host holds it (one
    command): what is not UTF-8, or a character cut at ``limit``, comes back as it is, so a caller
    that adds ``len()`` to its offset stays on the host's bytes."""
    check_text(log_path, "log path")
    script = 'tail -c +"$1" -- "$2"' + (' | head -c "$3"' if limit else "")
    args = [str(int(offset) + 1), log_path] + ([str(int(limit))] if limit else [])
    r = await host.run_script(script, args, timeout=60)
    if r.lost or r.timed_out:
        raise HostError("connection-lost" if r.lost else "timeout", f"reading {log_path} failed")
    return r.stdout_bytes
