"""The host layer: one async interface for a target host.

Two implementations: :class:`~tunedeck.hostops.localhost.LocalHost` (asyncio subprocesses) and
``SshHost`` (asyncssh, in :mod:`tunedeck.hostops.ssh`). Every higher layer
(collectors, launcher, pre-flight, bench) talks to a :class:`Host` and
never to asyncssh or subprocess directly, so the demo (a ``LocalHost``
whose PATH starts with the simulator's shims) and a real remote box run
the same code.

Primitives each implementation provides: :meth:`Host._run` (a :class:`Command` that
:meth:`Host.run` checked), :meth:`Host.stream`, :meth:`Host.forward_port`, :meth:`Host.close`.
Everything else (scripts on stdin, detached launches, file follow,
guarded signals) is built on those in this base class.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable, Mapping, Sequence

from tunedeck.util.safety import UnsafeInput, check_argv, check_env, env_command, visible

log = logging.getLogger(__name__)


class HostError(Exception):
    """A host operation failed in a way the UI shows as a state.

    ``kind`` is one of: ``unreachable`` (refused, timeout, DNS: retried),
    ``auth-failed``, ``hostkey-unknown``, ``hostkey-mismatch`` (never retried),
    ``connection-lost``, ``timeout``, ``invalid-input``, ``error``.
    """

    def __init__(self, kind: str, message: str, *, target: str = "") -> None:
        # messages quote what the host said (stderr, paths, reasons): shown on one line, escaped,
        # wherever they end up (CLI, status bar, banner, notifications)
        message = visible(message)
        super().__init__(message)
        self.kind = kind
        self.target = target
        self.message = message

    @property
    def retryable(self) -> bool:
        return self.kind in ("unreachable", "connection-lost", "timeout")

    def __str__(self) -> str:
        where = f"{visible(self.target)}: " if self.target else ""
        return f"{where}{self.message}"


@dataclass(frozen=True)
class RunResult:
    """Outcome of :meth:`Host.run`.

    ``exit_status`` is None when the process did not report one: the link
    died (``lost``), it hit the timeout (``timed_out``) or died on a signal
    (``exit_signal``). None is never success.

    ``stdout`` is decoded as UTF-8, with U+FFFD for what is not; ``stdout_bytes`` is stdout as the
    host sent it, for a reader that counts byte offsets (:func:`~tunedeck.hostops.logfollow.read_log`).
    """

    exit_status: int | None
    stdout: str
    stderr: str
    lost: bool = False
    timed_out: bool = False
    exit_signal: str | None = None
    stdout_bytes: bytes = b""

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.lost and not self.timed_out


@dataclass(frozen=True)
class Command:
    """A command for :meth:`Host.run`, its words and environment checked."""

    argv: list[str]
    env: dict[str, str]
    #: sent on stdin; None: stdin is empty
    input: str | None
    #: seconds before it is killed; None: no limit
    timeout: float | None


class Host(abc.ABC):
    """A machine tunedeck works on."""

    #: How the user named it ('local', 'user@host:port', an ssh alias, 'demo').
    target: str
    #: True when commands run on this machine (no port forward needed).
    is_local: bool = False
    #: The nvidia-smi that GPU queries on this host run: a ``--sim`` target without one of its own
    #: gets the simulated one (``${TUNEDECK_HOME}/sim/bin/nvidia-smi``, see
    #: :func:`tunedeck.services.runtime.ensure_sim`).
    nvidia_smi: str = "nvidia-smi"

    # ------------------------------------------------------------------ primitives
    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float | None = 30.0,
    ) -> RunResult:
        """Run ``argv`` (built with shlex.join on remote hosts) and collect its output.

        ``argv`` and ``env`` are checked here, before anything runs (:class:`UnsafeInput`)."""
        return await self._run(Command(check_argv(argv), check_env(env or {}), input, timeout))

    @abc.abstractmethod
    async def _run(self, cmd: Command) -> RunResult:
        """Run the checked ``cmd`` to its end (:meth:`run`)."""

    @abc.abstractmethod
    def stream(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        heartbeat: float | None = None,
    ) -> "ByteStream":
        """Start a long-running command and stream its stdout in chunks.

        Closing the stream (``aclose`` / leaving ``async with``) ends the
        process on the host, not only the channel.

        Without ``heartbeat`` the command's stdin is empty. With it, stdin stays
        open and gets one newline every ``heartbeat`` seconds while the stream is
        open: a command that ends when its stdin closes or goes quiet cannot
        outlive this process, even over a link that died without a word.
        """

    @abc.abstractmethod
    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        """Make ``remote_host:remote_port`` on the host reachable from here; return the local port."""

    async def put_file(self, data: bytes, path: str, *, mode: int = 0o600) -> None:
        """Write ``data`` to ``path`` on the host (an absolute path), creating its folder.

        Raises ``OSError`` when the host refuses (permissions, a full disk), its ``strerror`` the
        host's cause and its ``filename`` the path (:func:`tunedeck.util.files.os_error_text`), and
        :class:`HostError` when the link fails. A failed write leaves nothing behind: neither a part
        of the file nor a folder it created. Hosts that cannot take files say so."""
        raise HostError("error", f"{self.target}: cannot write files on this host", target=self.target)

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    # ------------------------------------------------------------------ derived
    async def run_script(self, script: str, args: Sequence[str] = (), *, timeout: float | None = 30.0) -> RunResult:
        """Run a POSIX sh script sent on stdin: the command line stays the constant ``/bin/sh -s``."""
        check_argv(["sh", *args], "script arguments")
        return await self.run(["/bin/sh", "-s", "--", *args], input=script, timeout=timeout)

    def stream_lines(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        heartbeat: float | None = None,
    ) -> "LineStream":
        """Decoded lines (without the newline) of a long-running command.

        Use it as ``async with host.stream_lines(argv) as lines: async for line in lines``:
        leaving the ``async with`` (also by ``break`` or an exception) ends the
        process on the host at once, not when the garbage collector runs.
        """
        return LineStream(self.stream(argv, env=env, heartbeat=heartbeat))

    async def __aenter__(self) -> "Host":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


#: the most one read of a command's output stream returns (a chunk of :class:`ByteStream`)
STREAM_READ_BYTES = 65536


class ByteStream(abc.ABC):
    """Async iterator of stdout chunks from a running command; an async context manager.

    ``exit_status`` is set once the command ended (None if the link was lost:
    then iteration raises ``HostError('connection-lost')``).
    """

    exit_status: int | None = None
    stderr_tail: str = ""
    #: ``time.monotonic()`` when the command last wrote anything (stdout or stderr); 0 before
    last_heard: float = 0.0
    #: the last 4 KiB the command wrote on stderr, where it is read as it comes (:meth:`_read_stderr`)
    _stderr: bytearray

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    def link_dead(self, reason: str) -> None:
        """The link carrying this stream is known dead (``reason``, e.g. no heartbeat). A stream
        over SSH drops its connection, so that closing the stream and every other command on
        that host reconnect at once instead of waiting for the keepalive or TCP; the command on
        the host is ended by its own watchdog, or after the reconnect. A local stream has no link."""
        return None  # a local stream: nothing to drop

    @abc.abstractmethod
    def _chunks(self) -> AsyncIterator[bytes]: ...

    async def _read_stderr(self, read: Callable[[int], Awaitable[bytes]]) -> None:
        """Read the command's stderr (``read``) until it ends: each chunk says the command lives
        (:attr:`last_heard`); its last 4 KiB are kept."""
        while True:
            chunk = await read(STREAM_READ_BYTES)
            if not chunk:
                return
            self.last_heard = time.monotonic()
            self._stderr += chunk
            del self._stderr[:-4096]

    @abc.abstractmethod
    async def aclose(self) -> None:
        """End the command on the host and release the channel."""

    async def __aenter__(self) -> "ByteStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class LineStream:
    """Lines of a :class:`ByteStream`; an async context manager and async iterator.

    Not an async generator on purpose: closing is explicit (``aclose`` /
    leaving ``async with``) and deterministic. Iterating without ``async with``
    closes the stream when the lines run out, but a ``break`` then leaves the
    process running until ``aclose()``.
    """

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self._it: AsyncIterator[bytes] | None = None
        self._buf = b""
        self._lines: list[bytes] = []
        self._eof = False

    @property
    def exit_status(self) -> int | None:
        return self.stream.exit_status

    @property
    def stderr_tail(self) -> str:
        return self.stream.stderr_tail

    def __aiter__(self) -> "LineStream":
        return self

    async def __anext__(self) -> str:
        while not self._lines:
            if self._eof:
                raise StopAsyncIteration
            if self._it is None:
                self._it = self.stream.__aiter__()
            try:
                chunk = await self._it.__anext__()
            except StopAsyncIteration:
                self._eof = True
                if self._buf:
                    self._lines.append(self._buf)
                    self._buf = b""
                await self.aclose()
                continue
            except BaseException:
                await self.aclose()
                raise
            *lines, self._buf = (self._buf + chunk).split(b"\n")
            self._lines.extend(lines)
        return self._lines.pop(0).decode("utf-8", "replace")

    async def aclose(self) -> None:
        await self.stream.aclose()
        it, self._it = self._it, None
        if it is not None and hasattr(it, "aclose"):
            try:
                await it.aclose()
            except Exception:  # noqa: BLE001 - already closed
                pass

    async def __aenter__(self) -> "LineStream":
        enter = getattr(self.stream, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def check_heartbeat(heartbeat: float | None) -> float | None:
    """A stream's heartbeat interval: None, or a positive finite number of seconds."""
    if heartbeat is None:
        return None
    if not isinstance(heartbeat, (int, float)) or not 0 < heartbeat < float("inf"):
        raise UnsafeInput(f"heartbeat {heartbeat!r}: must be a positive number of seconds")
    return float(heartbeat)


async def beat_stdin(write: Callable[[bytes], object], interval: float) -> None:
    """Write one newline every ``interval`` seconds until cancelled or the pipe breaks."""
    while True:
        await asyncio.sleep(interval)
        try:
            write(b"\n")
        except (OSError, RuntimeError) as e:  # the command closed its stdin, or the channel is gone
            log.info("stream heartbeat ends: %s", e)
            return


def target_name(host: Host) -> str:
    """How the user named ``host``; ``local`` for a host with no name."""
    return getattr(host, "target", "local") or "local"


def quote(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The exact command as a user would type it (shell-quoted, env first)."""
    return env_command(argv, env)


__all__ = [
    "STREAM_READ_BYTES",
    "ByteStream",
    "Command",
    "Host",
    "HostError",
    "LineStream",
    "RunResult",
    "beat_stdin",
    "check_heartbeat",
    "quote",
    "target_name",
]
