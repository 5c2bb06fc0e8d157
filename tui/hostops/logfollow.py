"""A run's log, read or followed from a byte offset: no byte lost or repeated across a lost link."""

from __future__ import annotations

import asyncio
import codecs
import logging
import re
import time
from typing import AsyncGenerator, Callable

from tui.hostops.hosts import ByteStream, Host, HostError, target_name
from tui.hostops.runstore import RunStore
from tui.util import retry
from tui.util.safety import check_text

_log = logging.getLogger(__name__)

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


class LineSplitter:
    """Bytes → display lines: UTF-8 (replace), ANSI stripped, a ``\\r`` redraw keeps the last frame."""

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""

    def feed(self, data: bytes) -> list[str]:
        self._buf += self._dec.decode(data)
        *lines, self._buf = self._buf.split("\n")
        return [self._clean(x) for x in lines]

    def partial(self) -> str:
        """The unterminated tail as it would look now (last \r frame)."""
        return self._clean(self._buf) if self._buf else ""

    def pending_bytes(self) -> int:
        """Bytes received but not yet shown (an unterminated line)."""
        return len(self._buf.encode("utf-8", "surrogatepass")) + len(self._dec.getstate()[0])

    def flush(self) -> list[str]:
        if not self._buf:
            return []
        line, self._buf = self._buf, ""
        return [self._clean(line)]

    @staticmethod
    def _clean(line: str) -> str:
        line = line.rstrip("\r")
        if "\r" in line:
            frames = [f for f in line.split("\r") if f.strip()]
            line = frames[-1] if frames else ""
        return _ANSI.sub("", line) if "\x1b" in line else line


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
        self._stream: ByteStream | None = None
        self._saved = self.offset
        self._last_save = 0.0

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        argv = [
            "/bin/sh",
            "-c",
            'echo $$; exec tail -c +"$1" -F -- "$2" 2>/dev/null',
            "sh",
            str(self.offset + 1),
            self.log_path,
        ]
        stream = self.host.stream(argv)
        self._stream = stream
        head = b""
        got_pid = False
        try:
            async with stream:
                async for chunk in stream:
                    if not got_pid:
                        head += chunk
                        if b"\n" not in head:
                            continue
                        first, chunk = head.split(b"\n", 1)
                        got_pid = True
                        self.remote_pid = int(first) if first.strip().isdigit() else None
                        if not chunk:
                            continue
                    self._maybe_save()
                    self.offset += len(chunk)
                    yield chunk
        finally:
            # Closing the stream (above) already ended the remote tail, or, when the link is
            # gone, queued it to be killed once the host reconnects (SshHost reaps stale streams,
            # guarded by start time). Killing it here would reconnect, with retries, before the
            # lost link reaches the caller: a dead link must be reported first.
            self._stream = None
            self.save()

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
    run_id: str | None = None,
    store: RunStore | None = None,
    persist: bool = False,
) -> int:
    """Follow ``log_path`` from ``offset`` until ``stop`` is set, reconnecting with
    backoff after a lost link (resuming at the consumed offset, so nothing is lost or
    repeated). ``on_idle`` runs after ``idle`` seconds without data. Returns the offset."""
    backoff = retry.Backoff(0.5, 10.0)
    attempt = 0
    while not stop.is_set():
        f = LogFollower(host, log_path, offset, run_id=run_id, store=store, persist=persist)
        it = f.chunks().__aiter__()
        try:
            while not stop.is_set():
                try:
                    chunk = await asyncio.wait_for(it.__anext__(), idle)
                except asyncio.TimeoutError:
                    if on_idle is not None:
                        on_idle()
                    continue
                except StopAsyncIteration:
                    # ``tail -F`` never ends on its own: its stream ending means the link went
                    if not stop.is_set():
                        raise HostError(
                            "connection-lost", f"following {log_path}: the stream ended", target=target_name(host)
                        ) from None
                    break
                offset = f.offset
                on_chunk(chunk)
                backoff.reset()
                attempt = 0
        except (HostError, OSError) as e:
            attempt += 1
            if on_error is not None:
                on_error(e, attempt)
        finally:
            offset = f.offset
            try:
                await it.aclose()  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - the stream is given up anyway; f.close() below ends it
                _log.debug("closing the log stream of %s failed", log_path, exc_info=True)
            await f.close()
        if not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), backoff.next())
            except asyncio.TimeoutError:
                pass
    return offset


async def read_log(host: Host, log_path: str, offset: int = 0, limit: int | None = None) -> bytes:
    """The log from ``offset`` (at most ``limit`` bytes) as bytes (one command)."""
    check_text(log_path, "log path")
    script = 'tail -c +"$1" -- "$2"' + (' | head -c "$3"' if limit else "")
    args = [str(int(offset) + 1), log_path] + ([str(int(limit))] if limit else [])
    r = await host.run_script(script, args, timeout=60)
    if r.lost or r.timed_out:
        raise HostError("connection-lost" if r.lost else "timeout", f"reading {log_path} failed")
    return r.stdout.encode("utf-8")
