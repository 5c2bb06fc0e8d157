"""The host layer: one async interface for a target host.

Two implementations: :class:`LocalHost` (asyncio subprocesses) and
``SshHost`` (asyncssh, in :mod:`tui.hostops.ssh`). Every higher layer
(collectors, launcher, pre-flight, bench) talks to a :class:`Host` and
never to asyncssh or subprocess directly, so the demo (a ``LocalHost``
whose PATH starts with the simulator's shims) and a real remote box run
the same code.

Primitives each implementation provides: :meth:`Host.run`,
:meth:`Host.stream`, :meth:`Host.forward_port`, :meth:`Host.close`.
Everything else (scripts on stdin, detached launches, file follow,
guarded signals) is built on those in this base class.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import os
import re
import shlex
import signal as _signal
import time
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Mapping, Sequence

from tui.util.aio import terminate_group
from tui.util.safety import UnsafeInput, check_argv, check_env, check_text, env_command, visible

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
    """

    exit_status: int | None
    stdout: str
    stderr: str
    lost: bool = False
    timed_out: bool = False
    exit_signal: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.lost and not self.timed_out


class Host(abc.ABC):
    """A machine tunedeck works on."""

    #: How the user named it ('local', 'user@host:port', an ssh alias, 'demo').
    target: str
    #: True when commands run on this machine (no port forward needed).
    is_local: bool = False
    #: The nvidia-smi that GPU queries on this host run: a ``--sim`` target without one of its own
    #: gets the simulated one (``${TUNEDECK_HOME}/sim/bin/nvidia-smi``, see
    #: :func:`tui.services.runtime.ensure_sim`).
    nvidia_smi: str = "nvidia-smi"

    # ------------------------------------------------------------------ primitives
    @abc.abstractmethod
    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float | None = 30.0,
    ) -> RunResult:
        """Run ``argv`` (built with shlex.join on remote hosts) and collect its output."""

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
        host's cause and its ``filename`` the path (:func:`tui.util.files.os_error_text`), and
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


# ====================================================================== local


#: where the descriptor scan stops when /proc/self/fd cannot be listed
_FD_SCAN_MAX = 4096


def _cloexec_above_stdio() -> None:
    """Child-side ``preexec_fn`` for event loops that ignore ``close_fds`` (uvloop: libuv's
    ``uv_spawn`` keeps every inheritable descriptor, and uvloop makes its own copies of the
    child's pipe ends inheritable, so they survive ``exec`` next to 0/1/2). Marks every
    descriptor above 2 close-on-exec, so ``exec`` drops them; 0/1/2 are untouched (the loop
    ``dup2``s the pipes there, which makes them inheritable whatever the source's flag). Runs in
    the forked child: no locks, no logging, errors ignored."""
    try:
        fds: Sequence[int] = [int(x) for x in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):
        fds = range(3, _FD_SCAN_MAX)
    for fd in fds:
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass


def _spawn_options() -> dict[str, object]:
    """Keyword arguments for ``asyncio.create_subprocess_exec``: a new session (so the whole
    process group can be ended), and no descriptor but stdin/stdout/stderr inherited. The
    stdlib loop honours ``close_fds`` (it uses ``subprocess.Popen``, which uses vfork when it
    can; a ``preexec_fn`` would force a plain fork); other loops get the close-on-exec hook."""
    opts: dict[str, object] = {"start_new_session": True, "close_fds": True}
    if not isinstance(asyncio.get_running_loop(), asyncio.BaseEventLoop):
        opts["preexec_fn"] = _cloexec_above_stdio
    return opts


#: Runs a local stream's command under a pipe watchdog (``sh -c WATCHDOG sh ARGV...``). The
#: wrapper starts a watchdog in the background, then ``exec``s the command, which so keeps the
#: wrapper's pid, session and process group (as if started directly: exit status, group kill).
#: The watchdog reads the wrapper's stdin, a pipe whose only write end tunedeck holds and never
#: writes: when tunedeck dies in any way (``kill -9`` included) the kernel closes it, ``read``
#: sees end-of-file and the watchdog TERMs the process group, so a quiet ``tail -F`` cannot be
#: orphaned. No Python runs in the forked child (a ``preexec_fn`` PR_SET_PDEATHSIG hook did, and
#: hung CI). The command gets /dev/null as stdin; the watchdog holds no stdout/stderr.
_WATCHDOG = (
    'exec 3<&0; { while read -r _; do :; done; kill -s TERM 0; } <&3 3<&- >/dev/null 2>&1 & exec "$@" 3<&- </dev/null'
)


def watchdog_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` wrapped so that it ends when the process holding its stdin pipe dies."""
    return ["/bin/sh", "-c", _WATCHDOG, "sh", *argv]


#: How long a local stream's command may keep running after it closed its stdout before the
#: watchdog is released (which ends its process group).
_EXIT_AFTER_EOF_S = 2.0


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


class _LocalStream(ByteStream):
    def __init__(self, argv: Sequence[str], env: Mapping[str, str], *, heartbeat: float | None = None) -> None:
        self._argv = list(argv)
        self._env = dict(env)
        self._heartbeat = heartbeat
        self._beat: asyncio.Task[None] | None = None
        self._stderr_task: asyncio.Task[None] | None = None
        self._stderr = bytearray()
        self._proc: asyncio.subprocess.Process | None = None

    async def _start(self) -> asyncio.subprocess.Process:
        if self._proc is None:
            # With a heartbeat the command reads the pipe itself and ends when it closes (it asked
            # for it), so it needs no watchdog; without one the watchdog holds the pipe.
            argv = self._argv if self._heartbeat else watchdog_argv(self._argv)
            self._proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,  # the lifeline: closed only when the stream ends
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                **_spawn_options(),  # type: ignore[arg-type]
            )
            self.last_heard = time.monotonic()
            if self._heartbeat and self._proc.stdin is not None:
                self._beat = asyncio.ensure_future(beat_stdin(self._proc.stdin.write, self._heartbeat))
                # a heartbeating command speaks on stderr too: read as it comes (liveness)
                self._stderr_task = asyncio.ensure_future(self._drain_stderr(self._proc))
        return self._proc

    async def _drain_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while True:
            chunk = await proc.stderr.read(STREAM_READ_BYTES)
            if not chunk:
                return
            self.last_heard = time.monotonic()
            self._stderr += chunk
            del self._stderr[:-4096]

    async def _chunks(self) -> AsyncIterator[bytes]:
        proc = await self._start()
        assert proc.stdout is not None
        while True:
            chunk = await proc.stdout.read(STREAM_READ_BYTES)
            if not chunk:
                break
            self.last_heard = time.monotonic()
            yield chunk
        # stdout is closed: the command is ending, but may not have exited yet (coreutils close
        # stdout in an atexit hook). Wait for its exit status first, then let the watchdog go (it
        # ends anything the command left in its group): released earlier, its TERM could land on
        # the command itself. Python >= 3.12 only returns from wait() once every pipe, the
        # watchdog's included, is closed, so the status is read from returncode here.
        deadline = time.monotonic() + _EXIT_AFTER_EOF_S
        # (asyncio has no event for "exit status known, pipes still open": a short poll)
        while proc.returncode is None and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        self._release_watchdog()
        self.exit_status = await proc.wait()
        if self._stderr_task is not None:
            await asyncio.wait({self._stderr_task}, timeout=_EXIT_AFTER_EOF_S)
            self.stderr_tail = bytes(self._stderr).decode("utf-8", "replace")
        elif proc.stderr is not None:
            self.stderr_tail = (await proc.stderr.read())[-4096:].decode("utf-8", "replace")

    def _release_watchdog(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
        proc = self._proc
        if proc is not None and proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()

    async def aclose(self) -> None:
        if self._proc is not None:
            if self._proc.returncode is not None:
                self._release_watchdog()
            await terminate_group(self._proc, grace=3)
            self._release_watchdog()
            if self._stderr_task is not None:
                self._stderr_task.cancel()


class LocalHost(Host):
    """This machine. ``env_overlay`` is merged into every command's environment
    (the demo host uses it to put the simulator's ``nvidia-smi`` first on PATH)."""

    is_local = True

    def __init__(self, target: str = "local", env_overlay: Mapping[str, str] | None = None) -> None:
        self.target = target
        self.env_overlay = dict(env_overlay or {})

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        merged = dict(os.environ)
        merged.update(self.env_overlay)
        if env:
            merged.update(check_env(env))
        return merged

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float | None = 30.0,
    ) -> RunResult:
        argv = check_argv(argv)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env(env),
                **_spawn_options(),  # type: ignore[arg-type]
            )
        except FileNotFoundError:
            return RunResult(127, "", f"{argv[0]}: command not found")
        except PermissionError as e:
            return RunResult(126, "", f"{argv[0]}: {e.strerror}")
        try:
            out, err = await asyncio.wait_for(proc.communicate(input.encode() if input is not None else None), timeout)
        except asyncio.TimeoutError:
            try:
                os.killpg(proc.pid, _signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
            return RunResult(None, "", f"timed out after {timeout:g} s", timed_out=True)
        except asyncio.CancelledError:
            try:
                os.killpg(proc.pid, _signal.SIGKILL)
            except ProcessLookupError:
                pass
            # reap it, so no transport outlives the loop; shielded so a second cancel can't skip it
            await asyncio.shield(proc.wait())
            raise
        rc = proc.returncode
        sig = None
        if rc is not None and rc < 0:
            sig = _signal.Signals(-rc).name if -rc in _signal.Signals._value2member_map_ else str(-rc)
            rc = None
        return RunResult(rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), exit_signal=sig)

    def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, heartbeat: float | None = None
    ) -> ByteStream:
        return _LocalStream(check_argv(argv), self._env(env), heartbeat=check_heartbeat(heartbeat))

    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        return remote_port

    async def put_file(self, data: bytes, path: str, *, mode: int = 0o600) -> None:
        check_text(path, "path")
        p = os.path.abspath(path)
        created = _missing_folders(os.path.dirname(p))
        try:
            os.makedirs(os.path.dirname(p), mode=0o700, exist_ok=True)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        except OSError as e:
            _remove_folders(created)
            raise OSError(e.errno, e.strerror, e.filename or p) from None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError as e:
            os.close(fd)
            os.unlink(p)
            _remove_folders(created)
            raise OSError(e.errno, e.strerror, p) from None
        os.close(fd)


def _missing_folders(folder: str) -> list[str]:
    """The folders ``os.makedirs(folder)`` would create, deepest first."""
    out = []
    while not os.path.lexists(folder) and folder != os.path.dirname(folder):
        out.append(folder)
        folder = os.path.dirname(folder)
    return out


def _remove_folders(folders: Sequence[str]) -> None:
    """Remove the folders a failed write created (deepest first), where they are still empty."""
    for f in folders:
        try:
            os.rmdir(f)
        except FileNotFoundError:
            continue
        except OSError as e:
            log.warning("cannot remove the folder %s left by a failed write: %s", f, e.strerror)
            return


def target_name(host: Host) -> str:
    """How the user named ``host``; ``local`` for a host with no name."""
    return getattr(host, "target", "local") or "local"


# ====================================================================== targets

USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]*$", re.IGNORECASE)
HOSTNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$")


@dataclass(frozen=True)
class Target:
    """A parsed TARGET: ``local`` or ``[user@]host[:port]`` / ssh alias (port None = from config)."""

    host: str
    user: str | None = None
    port: int | None = None

    @property
    def is_local(self) -> bool:
        return self.host == "local"

    def __str__(self) -> str:
        s = self.host if ":" not in self.host else f"[{self.host}]"
        if self.user:
            s = f"{self.user}@{s}"
        if self.port:
            s = f"{s}:{self.port}"
        return s


def parse_target(text: str) -> Target:
    """Parse ``local``, ``[user@]host[:port]``, ``[user@][v6addr]:port`` or an alias."""
    check_text(text, "target")
    if not text or text.strip() != text:
        raise UnsafeInput(f"target {text!r}: empty or padded with spaces")
    if text in ("local", "localhost-direct"):
        return Target("local")
    user = None
    rest = text
    if "@" in rest:
        user, rest = rest.rsplit("@", 1)
        if not USER_RE.match(user):
            raise UnsafeInput(f"target {text!r}: invalid user name {user!r}")
    port: int | None = None
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise UnsafeInput(f"target {text!r}: unclosed '[' in address")
        host, tail = rest[1:end], rest[end + 1 :]
        if tail:
            if not tail.startswith(":"):
                raise UnsafeInput(f"target {text!r}: unexpected {tail!r} after address")
            port = _port(tail[1:], text)
    elif rest.count(":") == 1:
        host, p = rest.split(":")
        port = _port(p, text)
    elif rest.count(":") > 1:
        host = rest  # bare IPv6 literal
    else:
        host = rest
    if not host or host.startswith("-"):
        raise UnsafeInput(f"target {text!r}: invalid host name")
    if ":" not in host and not HOSTNAME_RE.match(host):
        raise UnsafeInput(f"target {text!r}: invalid host name {host!r}")
    return Target(host, user, port)


def _port(p: str, text: str) -> int:
    if not p.isdigit() or not (0 < int(p) < 65536):
        raise UnsafeInput(f"target {text!r}: invalid port {p!r}")
    return int(p)


def quote(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The exact command as a user would type it (shell-quoted, env first)."""
    return env_command(argv, env)


__all__ = [
    "ByteStream",
    "Host",
    "HostError",
    "LineStream",
    "LocalHost",
    "RunResult",
    "Target",
    "parse_target",
    "quote",
    "shlex",
]
