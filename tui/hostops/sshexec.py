"""Running commands on an :class:`~tunedeck.hostops.ssh.SshHost`: the quoted command line, one channel
per command (a short one to its end, :func:`exec_command`; a long-running one as a
:class:`SshStream`), and what their exit says (docs/reliability.md S1, S9, S10).

The connection, its channel slots and what to do when it dies are the host's (:mod:`tunedeck.hostops.ssh`)."""

from __future__ import annotations

import asyncio
import shlex
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, AsyncIterator, Mapping, Sequence

import asyncssh

from tunedeck.hostops.hosts import STREAM_READ_BYTES, ByteStream, HostError, RunResult, beat_stdin
from tunedeck.hostops.sshgate import describe
from tunedeck.util.safety import UnsafeInput, env_argv

if TYPE_CHECKING:
    from tunedeck.hostops.ssh import SshHost

#: Extra seconds the local deadline allows beyond the remote ``timeout``.
LOCAL_GRACE = 5.0
#: Seconds to wait for a channel that closed before its stdin was sent to finish closing (its exit
#: status comes before the close; without one by then, the link is taken as lost).
CLOSE_WAIT_S = 10.0
#: Seconds a stream may take to print its PID line.
START_TIMEOUT = 30.0


@dataclass
class Orphan:
    """A streamed command that may still run on the host: stopped after the next reconnect."""

    pid: int
    starttime: str


def command_line(argv: Sequence[str], env: Mapping[str, str] | None, timeout: float | None) -> str:
    """``argv`` (with ``env``) as one quoted command line, under ``timeout -k 2 N`` when ``timeout`` is set."""
    words = env_argv(argv, env)
    if timeout is not None:
        if timeout <= 0:
            raise UnsafeInput(f"timeout must be positive, got {timeout!r}")
        n = max(1, int(timeout + 0.999))
        words = ["timeout", "-k", "2", str(n), *words]
    cmd = shlex.join(words)
    try:
        cmd.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UnsafeInput(f"command: cannot be encoded as UTF-8 ({e.reason})") from None
    return cmd


async def open_process(
    host: SshHost, command: str
) -> tuple[asyncssh.SSHClientConnection, asyncssh.SSHClientProcess[bytes]]:
    """Open a channel running ``command``; reconnects once if the connection turned out dead.

    The caller must hold a channel slot."""
    last: Exception | None = None
    for attempt in (1, 2):
        conn = await host._connection()
        try:
            proc = await conn.create_process(command, encoding=None)
        except asyncssh.ChannelOpenError as e:
            last = e
            if "open failed" in (e.reason or ""):
                await asyncio.sleep(0.2 * attempt)  # MaxSessions: another client shares the slots
            else:
                host._on_lost(conn, e)
        except (asyncssh.Error, OSError) as e:
            last = e
            host._on_lost(conn, e)
        else:
            return conn, proc
    raise HostError(
        "connection-lost", f"cannot open an SSH channel: {describe(last or Exception())}", target=host.target
    )


async def exec_command(host: SshHost, command: str, data: bytes | None, timeout: float | None) -> RunResult:
    """Run ``command`` (already quoted by :func:`command_line`) with ``data`` on its stdin."""
    host._sync()
    await host._connection()
    assert host._channels is not None
    async with host._channels:
        conn, proc = await open_process(host, command)
        started = time.monotonic()
        try:
            if not data:
                proc.stdin.write_eof()
            fut = proc.communicate(data) if data else proc.communicate()
            if timeout is None:
                out, err = await fut
            else:
                out, err = await asyncio.wait_for(fut, timeout + LOCAL_GRACE)
        except asyncio.TimeoutError:
            out, err = proc.collect_output()
            return RunResult(None, _dec(out), _timed_out_msg(err, timeout), timed_out=True, stdout_bytes=_raw(out))
        except BrokenPipeError as e:
            # the channel closed before ``data`` went: the command ended without reading its
            # stdin (a failed `mkdir` before a `cat`), or the link went. Its exit status, when
            # one came, tells which; the link is not called lost for a command that ended.
            try:
                await asyncio.wait_for(proc.wait_closed(), CLOSE_WAIT_S)
            except asyncio.TimeoutError:
                # no close in that time either: not a command that ended but the link, which is
                # dropped so that the next command connects again instead of waiting on it
                host._drop(conn, f"a channel stayed open {CLOSE_WAIT_S:g} s after its stdin broke ({describe(e)})")
                return RunResult(None, "", f"connection lost: {describe(e)}", lost=True)
            out, err = proc.collect_output()
        except (asyncssh.Error, OSError) as e:
            host._on_lost(conn, e)
            return RunResult(None, "", f"connection lost: {describe(e)}", lost=True)
        finally:
            proc.close()
    status, sig = proc.exit_status, _signal_name(proc.exit_signal)
    if sig:
        return RunResult(None, _dec(out), _dec(err), exit_signal=sig, stdout_bytes=_raw(out))
    if status is None:  # S1: the link died before an exit status arrived; never success
        return RunResult(
            None,
            _dec(out),
            _dec(err) or "connection lost before the command finished",
            lost=True,
            stdout_bytes=_raw(out),
        )
    if timeout is not None and status in (124, 137) and time.monotonic() - started >= timeout * 0.95:
        return RunResult(None, _dec(out), _timed_out_msg(err, timeout), timed_out=True, stdout_bytes=_raw(out))
    return RunResult(status, _dec(out), _dec(err), stdout_bytes=_raw(out))


class SshStream(ByteStream):
    """A long-running command on an :class:`~tunedeck.hostops.ssh.SshHost` (see its ``stream``)."""

    def __init__(self, host: SshHost, command: str, *, heartbeat: float | None = None) -> None:
        self._host = host
        self._command = command
        self._heartbeat = heartbeat
        self._beat: asyncio.Task[None] | None = None
        self._proc: asyncssh.SSHClientProcess[bytes] | None = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self._slots = 0
        self._closing = False
        self._closed = False
        self._start_lock: asyncio.Lock | None = None
        self._stderr_task: asyncio.Task[None] | None = None
        self._stderr = bytearray()
        self._close_task: asyncio.Task[None] | None = None
        self.pid: int | None = None
        self.starttime = "-"
        self.exit_signal: str | None = None

    async def __aenter__(self) -> "SshStream":
        await self._start()
        return self

    async def _start(self) -> None:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._proc is not None or self._closed:
                return
            if self._closing:
                raise HostError("error", "stream is closed", target=self._host.target)
            host = self._host
            host._sync()
            await host._connection()
            assert host._stream_slots is not None and host._channels is not None
            await host._stream_slots.acquire()
            self._slots = 1
            try:
                await host._channels.acquire()
                self._slots = 2
                self._conn, self._proc = await open_process(host, self._command)
                if self._heartbeat:
                    self._beat = asyncio.ensure_future(beat_stdin(self._proc.stdin.write, self._heartbeat))
                else:
                    self._proc.stdin.write_eof()
                self._stderr_task = asyncio.ensure_future(self._drain_stderr(self._proc))
                try:
                    line = await asyncio.wait_for(self._proc.stdout.readline(), START_TIMEOUT)
                except asyncio.TimeoutError:
                    raise HostError(
                        "timeout",
                        f"the streamed command did not start within {START_TIMEOUT:g} s",
                        target=host.target,
                    ) from None
            except BaseException:
                if self._proc is not None:
                    self._proc.close()
                await self._release()
                raise
            parts = line.split()
            if not line.endswith(b"\n") or not parts or not parts[0].isdigit():
                await self._finish_proc()
                await self._release()
                raise HostError(
                    "connection-lost",
                    "the streamed command did not start (connection lost?)",
                    target=host.target,
                )
            self.pid = int(parts[0])
            self.starttime = parts[1].decode() if len(parts) > 1 and parts[1].isdigit() else "-"
            self.last_heard = time.monotonic()

    async def _drain_stderr(self, proc: asyncssh.SSHClientProcess[bytes]) -> None:
        try:
            await self._read_stderr(proc.stderr.read)
        except Exception:  # noqa: BLE001 - the stdout side reports the loss
            return

    async def _chunks(self) -> AsyncIterator[bytes]:
        await self._start()
        proc = self._proc
        if proc is None:
            return
        while True:
            try:
                chunk = await proc.stdout.read(STREAM_READ_BYTES)
            except (asyncssh.Error, OSError):
                chunk = b""
            if not chunk:
                break
            self.last_heard = time.monotonic()
            yield chunk
        await self._finish_proc()
        if self._closing:
            return
        await self._release()
        if self.exit_status is None and self.exit_signal is None:
            raise HostError(
                "connection-lost",
                "connection lost while streaming (the command may still run)",
                target=self._host.target,
            )

    async def _finish_proc(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            await asyncio.wait_for(proc.wait_closed(), 10)
        except (asyncio.TimeoutError, asyncssh.Error, OSError):
            proc.close()
        if self._stderr_task is not None:
            try:
                await asyncio.wait_for(self._stderr_task, 1)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                pass
        self.stderr_tail = bytes(self._stderr).decode("utf-8", "replace")
        sig = _signal_name(proc.exit_signal)
        self.exit_signal = sig
        self.exit_status = None if sig else proc.exit_status

    async def _release(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
        host = self._host
        if self._slots >= 2 and host._channels is not None:
            host._channels.release()
        if self._slots >= 1 and host._stream_slots is not None:
            host._stream_slots.release()
        self._slots = 0

    def link_dead(self, reason: str) -> None:
        conn = self._conn
        if conn is not None:
            self._host._drop(conn, reason)

    async def aclose(self) -> None:
        if self._closed:
            return
        if self._close_task is None:
            self._closing = True
            self._close_task = asyncio.ensure_future(self._do_close())
        await asyncio.shield(self._close_task)

    async def _do_close(self) -> None:
        try:
            proc = self._proc
            if proc is None:
                return
            # no exit status yet: still running, or the link died and it may still run (S10)
            running = proc.exit_status is None and proc.exit_signal is None
            if running and self.pid is not None:
                host = self._host
                if host._conn is self._conn and self._conn is not None:
                    try:
                        await host._kill_remote(self.pid, self.starttime)
                    except (HostError, UnsafeInput):
                        host._orphans.append(Orphan(self.pid, self.starttime))
                else:
                    host._orphans.append(Orphan(self.pid, self.starttime))
            proc.close()
            try:
                await asyncio.wait_for(proc.wait_closed(), 5)
            except (asyncio.TimeoutError, asyncssh.Error, OSError):
                pass
            if self._stderr_task is not None:
                self._stderr_task.cancel()
        finally:
            await self._release()
            self._closed = True


def _timed_out_msg(err: bytes | str | None, timeout: float | None) -> str:
    e = _dec(err).rstrip("\n")
    return (e + "\n" if e else "") + f"timed out after {timeout:g} s"


def _signal_name(sig: object) -> str | None:
    if not sig:
        return None
    if isinstance(sig, tuple):
        sig = sig[0]
    return str(sig)


def _raw(b: bytes | str | None) -> bytes:
    """stdout as the host sent it (the channel is opened with ``encoding=None``: bytes)."""
    if b is None:
        return b""
    if isinstance(b, str):
        return b.encode("utf-8")
    return b


def _dec(b: bytes | str | None) -> str:
    if b is None:
        return ""
    if isinstance(b, str):
        return b
    return b.decode("utf-8", "replace")
