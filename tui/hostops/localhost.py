"""``LocalHost``: the :class:`~tunedeck.hostops.hosts.Host` primitives on this machine, over asyncio
subprocesses: each command in a new session with only stdin, stdout and stderr inherited, a
stream's command under a pipe watchdog (it ends when tunedeck dies, however), files written
atomically with the folders a failed write created removed again. The demo host is a
``LocalHost`` (:mod:`tunedeck.sim.demo`)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal as _signal
import time
from typing import AsyncIterator, Mapping, Sequence

from tunedeck.hostops.hosts import STREAM_READ_BYTES, ByteStream, Command, Host, RunResult, beat_stdin, check_heartbeat
from tunedeck.util.aio import kill_group, terminate_group
from tunedeck.util.safety import check_argv, check_env, check_text

log = logging.getLogger(__name__)


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
        await self._read_stderr(proc.stderr.read)

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

    async def _run(self, cmd: Command) -> RunResult:
        argv, input, timeout = cmd.argv, cmd.input, cmd.timeout
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env(cmd.env),
                **_spawn_options(),  # type: ignore[arg-type]
            )
        except FileNotFoundError:
            return RunResult(127, "", f"{argv[0]}: command not found")
        except PermissionError as e:
            return RunResult(126, "", f"{argv[0]}: {e.strerror}")
        try:
            out, err = await asyncio.wait_for(proc.communicate(input.encode() if input is not None else None), timeout)
        except asyncio.TimeoutError:
            kill_group(proc.pid)
            await proc.wait()
            return RunResult(None, "", f"timed out after {timeout:g} s", timed_out=True)
        except asyncio.CancelledError:
            kill_group(proc.pid)
            # reap it, so no transport outlives the loop; shielded so a second cancel can't skip it
            await asyncio.shield(proc.wait())
            raise
        rc = proc.returncode
        sig = None
        if rc is not None and rc < 0:
            sig = _signal.Signals(-rc).name if -rc in _signal.Signals._value2member_map_ else str(-rc)
            rc = None
        return RunResult(
            rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), exit_signal=sig, stdout_bytes=out
        )

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


__all__ = ["LocalHost", "watchdog_argv"]
