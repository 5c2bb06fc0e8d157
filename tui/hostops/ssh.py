"""``SshHost``: the :class:`~tunedeck.hostops.hosts.Host` primitives over asyncssh.

Behaviour (see docs/reliability.md S1-S10):

* one connection per host, reused by every channel; at most ``max_channels``
  (8, under sshd's default ``MaxSessions`` 10) channels at once, of which
  streams may hold at most ``max_streams`` so short commands always get a slot;
* at most 3 SSH handshakes in flight per event loop (sshd ``MaxStartups``), and no attempt
  at an endpoint whose key or credentials were refused until the user acts: both in
  :mod:`tunedeck.hostops.sshgate`;
* keepalive 15 s x 3, connect timeout 20 s, login timeout 30 s;
* agent and X11 forwarding off; the agent is only used to authenticate;
* host keys are ALWAYS checked against tunedeck's own known_hosts and
  ``~/.ssh/known_hosts``; ``~/.ssh/config`` is never handed to asyncssh (it
  could switch checking off): only HostName/User/Port/IdentityFile are read
  from it by :func:`read_ssh_config`;
* unknown key -> ``HostError('hostkey-unknown')`` with the SHA256 fingerprint,
  changed key -> ``HostError('hostkey-mismatch')`` with old and new
  fingerprints, bad credentials -> ``auth-failed``: none of them is retried.
  Refused / timed out / DNS failures -> ``unreachable``, retried with full
  jitter exponential backoff;
* a command whose link dies is reported ``lost`` (never success); commands
  run under ``timeout -k 2 N`` on the host and a local deadline;
* a stream runs as ``echo PID STARTTIME; exec argv``; closing it kills that
  process (checked by start time against PID reuse) with a separate command,
  because closing the channel alone leaves it running and holding a slot.

This module holds the connection and its trust (host keys, refusals, retries, forwards);
running commands over it is :mod:`tunedeck.hostops.sshexec`, files :mod:`tunedeck.hostops.sshfiles`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shlex
import socket
import time
import weakref
from dataclasses import dataclass
from typing import Mapping, Sequence

import asyncssh

from tunedeck.hostops import sshfiles
from tunedeck.hostops.hosts import ByteStream, Command, Host, HostError, RunResult, check_heartbeat
from tunedeck.hostops.hostscripts import KILL_SCRIPT, STREAM_WRAPPER
from tunedeck.hostops.knownhosts import (
    fingerprint,
    key_type_label,
    known_keys_for,
    load_known_hosts,
)
from tunedeck.hostops.sshconfig import Endpoint, is_ip, resolve_endpoint
from tunedeck.hostops.sshexec import Orphan, SshStream, command_line, exec_command
from tunedeck.hostops.sshgate import (
    clear_block,
    describe,
    fetch_host_key,
    handshake_slot,
    remember_refusal,
    remembered_refusal,
)
from tunedeck.hostops.target import HOSTNAME_RE, Target, parse_target
from tunedeck.util import retry
from tunedeck.util.safety import UnsafeInput, check_text, env_argv, visible

log = logging.getLogger(__name__)

# ====================================================================== options


@dataclass
class SshOptions:
    """Tunables; tests shrink keepalive and backoff."""

    keepalive_interval: float = 15.0
    keepalive_count_max: int = 3
    connect_timeout: float = 20.0
    login_timeout: float = 30.0
    #: Connection attempts per connect for ``unreachable`` errors; None = forever.
    retry_attempts: int | None = 4
    backoff_base: float = 0.5
    backoff_cap: float = 60.0
    max_channels: int = 8
    max_streams: int = 6


# ====================================================================== the host


class _Client(asyncssh.SSHClient):
    def __init__(self, host: "SshHost") -> None:
        self._host = weakref.ref(host)
        self._conn: asyncssh.SSHClientConnection | None = None

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        self._conn = conn

    def connection_lost(self, exc: Exception | None) -> None:
        host = self._host()
        if host is not None and self._conn is not None:
            host._on_lost(self._conn, exc)

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        """Called by asyncssh only for a key that is NOT in known_hosts: remember it, so the
        refusal can show its fingerprint without a second connection, and refuse it."""
        h = self._host()
        if h is not None:
            h._presented_key = key
        return False


@dataclass
class _Forward:
    local_port: int
    listener: asyncssh.SSHListener | None = None
    conn: asyncssh.SSHClientConnection | None = None


class SshHost(Host):
    """A remote machine over one asyncssh connection (made lazily, re-made after loss)."""

    is_local = False

    def __init__(self, target: Target | str, options: SshOptions | None = None, **overrides: object) -> None:
        self._target = parse_target(target) if isinstance(target, str) else target
        self.target = str(self._target)
        for k in overrides:
            if k not in SshOptions.__dataclass_fields__:
                raise TypeError(f"unknown SSH option {k!r}")
        self.options = dataclasses.replace(options or SshOptions(), **overrides)  # type: ignore[arg-type]
        self._endpoint: Endpoint | None = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._channels: asyncio.Semaphore | None = None
        self._stream_slots: asyncio.Semaphore | None = None
        self._forwards: dict[tuple[str, int], _Forward] = {}
        self._orphans: list[Orphan] = []
        self._closed = False
        self._ever_connected = False
        #: why SFTP was refused here (the sshd has no SFTP subsystem), once it was; then files go to ``cat``
        self.sftp_refused: str | None = None
        self._bg: set[asyncio.Task[object]] = set()
        #: ``idle`` | ``connecting`` | ``connected`` | ``reconnecting`` | ``disconnected`` | ``failed`` | ``closed``
        self.state = "idle"
        self.attempt = 0
        self.next_retry_at: float | None = None
        self.last_error: HostError | None = None
        self.connects = 0
        #: connection attempts made (handshakes started), for tests and diagnostics
        self.attempts = 0
        self._failures = 0
        self._presented_key: asyncssh.SSHKey | None = None

    # ------------------------------------------------------------------ status
    @property
    def endpoint(self) -> Endpoint:
        if self._endpoint is None:
            self._endpoint = resolve_endpoint(self._target)
        return self._endpoint

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def state_text(self) -> str:
        """One line for a status bar, e.g. ``reconnecting (attempt 2, next in 3s, last error: ...)``."""
        err = f"last error: {self.last_error.message}" if self.last_error else ""
        if self.state == "reconnecting":
            parts = [f"attempt {self.attempt}"]
            if self.next_retry_at is not None:
                parts.append(f"next in {max(0.0, self.next_retry_at - time.monotonic()):.0f}s")
            if err:
                parts.append(err)
            return f"reconnecting ({', '.join(parts)})"
        if self.state in ("failed", "disconnected") and err:
            return f"{self.state} ({err})"
        return self.state

    async def connect(self) -> None:
        """Connect now (with retries and backoff) instead of on the first command."""
        await self._connection()

    def retry(self) -> None:
        """The user asked to try again (``r``): lift a host-key or authentication refusal once.

        Until then such a failure is remembered for this endpoint and every caller gets it at
        once, without connecting: polling loops must not hammer a host whose key changed."""
        try:
            clear_block(self.endpoint)
        except UnsafeInput:
            pass
        if self.state == "failed":
            self.state = "idle"

    async def wait_disconnected(self) -> None:
        """Return once the current connection is gone (a supervisor then calls :meth:`connect`)."""
        conn = self._conn
        if conn is not None:
            await conn.wait_closed()

    # ------------------------------------------------------------------ connection
    def _sync(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            # used from a new event loop (e.g. a second asyncio.run): the old connection,
            # locks and forwards belong to the old loop and cannot be awaited here
            old, self._conn = self._conn, None
            if old is not None:
                try:
                    old.abort()
                except RuntimeError:  # its loop is closed already
                    pass
            self._lock = None
            self._forwards.clear()
        self._loop = loop
        if self._lock is None:
            self._lock = asyncio.Lock()
            self._channels = asyncio.Semaphore(self.options.max_channels)
            self._stream_slots = asyncio.Semaphore(min(self.options.max_streams, self.options.max_channels - 1))

    def _on_lost(self, conn: asyncssh.SSHClientConnection, exc: Exception | None) -> None:
        if conn is self._conn:
            self._conn = None
            if not self._closed:
                self.state = "disconnected"
                if exc is not None:
                    self.last_error = HostError(
                        "connection-lost", f"connection lost: {describe(exc)}", target=self.target
                    )

    def _drop(self, conn: asyncssh.SSHClientConnection, reason: str) -> None:
        """``conn`` is known dead (``reason``: e.g. a stream's heartbeat stopped): forget and abort
        it, so the next command reconnects at once instead of waiting for the keepalive or TCP."""
        if conn is self._conn:
            log.warning("%s: %s; reconnecting", self.target, visible(reason))
            self._on_lost(conn, ConnectionError(reason))
        conn.abort()

    async def _connection(self) -> asyncssh.SSHClientConnection:
        if self._closed:
            raise HostError("error", "host connection is closed", target=self.target)
        self._sync()
        conn = self._conn
        if conn is not None:
            return conn
        assert self._lock is not None
        failures = self._failures
        async with self._lock:
            if self._conn is not None:
                return self._conn
            if self._failures != failures and self.last_error is not None:
                # another caller just gave up on this host: fail fast with its error
                raise self.last_error
            self._check_block()
            try:
                conn = await self._connect_with_retry()
            except HostError as e:
                self._failures += 1
                try:
                    remembered = remember_refusal(self.endpoint, e)
                except UnsafeInput:
                    remembered = False
                if remembered:
                    log.warning("%s: %s; not retrying until the user acts", self.target, visible(e.message))
                raise
            self._conn = conn
            self._after_connect(conn)
            return conn

    def _check_block(self) -> None:
        """Raise the remembered permanent failure for this endpoint, unless the user acted."""
        try:
            ep = self.endpoint
        except UnsafeInput:
            return
        error = remembered_refusal(ep)
        if error is None:
            return
        self.state = "failed"
        self.last_error = error
        raise HostError(error.kind, error.message, target=self.target)

    async def _connect_with_retry(self) -> asyncssh.SSHClientConnection:
        opts = self.options
        self.attempt = 0
        while True:
            self.attempt += 1
            self.state = "reconnecting" if (self._ever_connected or self.attempt > 1) else "connecting"
            self.next_retry_at = None
            try:
                conn = await self._open()
            except HostError as e:
                e.target = e.target or self.target
                self.last_error = e
                if e.kind != "unreachable" or (opts.retry_attempts is not None and self.attempt >= opts.retry_attempts):
                    self.state = "failed" if e.kind != "unreachable" else "disconnected"
                    raise
                delay = retry.delay(self.attempt + 1, base=opts.backoff_base, cap=opts.backoff_cap, jitter="full")
                self.state = "reconnecting"
                self.next_retry_at = time.monotonic() + delay
                await asyncio.sleep(delay)
                continue
            self.state = "connected"
            self.next_retry_at = None
            self._ever_connected = True
            self.connects += 1
            return conn

    async def _open(self) -> asyncssh.SSHClientConnection:
        """One connection attempt, errors mapped to HostError kinds."""
        try:
            ep = self.endpoint
        except UnsafeInput as e:
            raise HostError("invalid-input", str(e)) from None
        kh = load_known_hosts()
        opts = self.options
        kwargs: dict[str, object] = dict(
            port=ep.port,
            username=ep.user,
            known_hosts=kh,
            config=[],
            agent_forwarding=False,
            x11_forwarding=False,
            request_pty=False,
            gss_auth=False,
            gss_kex=False,
            host_based_auth=False,
            kbdint_auth=False,
            password_auth=False,
            keepalive_interval=opts.keepalive_interval,
            keepalive_count_max=opts.keepalive_count_max,
            connect_timeout=opts.connect_timeout,
            login_timeout=opts.login_timeout,
            client_factory=lambda: _Client(self),
        )
        if ep.identity_files:
            kwargs["client_keys"] = list(ep.identity_files)
            kwargs["ignore_encrypted"] = True
        self._presented_key = None
        async with handshake_slot():
            self.attempts += 1
            try:
                conn = await asyncio.wait_for(
                    asyncssh.connect(ep.host, **kwargs),
                    opts.connect_timeout + opts.login_timeout + 5,
                )
            except asyncssh.HostKeyNotVerifiable:
                pass  # diagnosed below, outside the handshake slot
            except asyncssh.PermissionDenied as e:
                keys = ", ".join(ep.identity_files) or "no key files"
                raise HostError(
                    "auth-failed",
                    f"{ep}: authentication failed ({e.reason}); tried {keys}"
                    + (" and the ssh agent" if os.environ.get("SSH_AUTH_SOCK") else ""),
                ) from None
            except (ConnectionRefusedError, socket.gaierror, TimeoutError, asyncio.TimeoutError) as e:
                raise HostError("unreachable", f"{ep.host}:{ep.port}: {describe(e)}") from None
            except (asyncssh.ConnectionLost, asyncssh.ServiceNotAvailable, ConnectionError) as e:
                raise HostError("unreachable", f"{ep.host}:{ep.port}: {describe(e)}") from None
            except OSError as e:
                raise HostError("unreachable", f"{ep.host}:{ep.port}: {describe(e)}") from None
            except asyncssh.KeyImportError as e:
                raise HostError("error", f"{ep}: cannot load a client key: {e}") from None
            except asyncssh.Error as e:
                raise HostError("error", f"{ep}: SSH error: {describe(e)}") from None
            else:
                return conn
        raise await self._hostkey_error(ep)

    async def _hostkey_error(self, ep: Endpoint) -> HostError:
        known = await known_keys_for(ep)
        # the key the refused handshake presented: no second connection just to show it
        key: asyncssh.SSHKey | None = self._presented_key
        if key is None:
            try:
                key = await fetch_host_key(ep, timeout=self.options.connect_timeout)
            except HostError:
                key = None
        new = f"{key_type_label(key)} key {fingerprint(key)}" if key else "a key tunedeck could not fetch"
        trust = f"tunedeck trust {self.target}"
        if known:
            olds = "; ".join(f"{fingerprint(k)} ({key_type_label(k)}, in {f})" for f, k in known)
            return HostError(
                "hostkey-mismatch",
                f"HOST KEY MISMATCH for {ep.known_hosts_name}: known key {olds}, but the server now "
                f"presents {new}. This can mean the host was reinstalled or someone is intercepting "
                "the connection; tunedeck will not connect. If the change is expected, remove the old "
                f"line and run `{trust}`.",
                target=self.target,
            )
        return HostError(
            "hostkey-unknown",
            f"unknown host key for {ep.known_hosts_name}: the server presents {new}. Compare it with the "
            "host's own fingerprint (on the host: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), "
            f"then run `{trust}`.",
            target=self.target,
        )

    def _after_connect(self, conn: asyncssh.SSHClientConnection) -> None:
        if self._forwards or self._orphans:
            t = asyncio.ensure_future(self._resync(conn))
            self._bg.add(t)
            t.add_done_callback(self._bg.discard)

    async def _resync(self, conn: asyncssh.SSHClientConnection) -> None:
        """After a reconnect: restore port forwards on their old local ports, reap stale streams."""
        for key, fw in list(self._forwards.items()):
            if fw.conn is not conn:
                try:
                    await self._listen(conn, key, fw)
                except Exception:  # noqa: BLE001 - re-tried on the next forward_port()
                    pass
        orphans, self._orphans = self._orphans, []
        for o in orphans:
            try:
                await self.run_script(KILL_SCRIPT, [str(o.pid), o.starttime], timeout=15)
            except HostError:
                self._orphans.append(o)

    # ------------------------------------------------------------------ commands
    async def _run(self, cmd: Command) -> RunResult:
        command = command_line(cmd.argv, cmd.env, cmd.timeout)
        stdin = cmd.input.encode("utf-8") if cmd.input is not None else None
        return await exec_command(self, command, stdin, cmd.timeout)

    def stream(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, heartbeat: float | None = None
    ) -> ByteStream:
        inner = env_argv(argv, env)  # validates before anything connects
        command = shlex.join(["sh", "-c", STREAM_WRAPPER, "sh", *inner])
        return SshStream(self, command, heartbeat=check_heartbeat(heartbeat))

    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        if not isinstance(remote_port, int) or not (0 < remote_port < 65536):
            raise UnsafeInput(f"remote port {remote_port!r} is out of range")
        check_text(remote_host, "remote host")
        if remote_host.startswith("-") or not (HOSTNAME_RE.match(remote_host) or is_ip(remote_host)):
            raise UnsafeInput(f"remote host {remote_host!r} is not a valid host name")
        key = (remote_host, remote_port)
        conn = await self._connection()
        fw = self._forwards.get(key)
        if fw is not None and fw.conn is conn and fw.listener is not None:
            return fw.local_port
        if fw is None:
            fw = self._forwards[key] = _Forward(0)
        await self._listen(conn, key, fw)
        return fw.local_port

    async def put_file(self, data: bytes, path: str, *, mode: int = 0o600) -> None:
        """SFTP upload (the folder is created 0700 when missing). An sshd without an SFTP
        subsystem (no ``Subsystem sftp`` line) refuses the channel: then, and from then on for
        this host, the bytes go to ``cat`` over an exec channel (:data:`~tunedeck.hostops.sshfiles.PUT_SCRIPT`). OpenSSH's
        SFTP server reports a full disk (and most errors) only as "Failure": then the file is
        written once more with ``cat``, whose error names the cause. A failed write removes
        the part written and the folders it made, either way (:mod:`tunedeck.hostops.sshfiles`)."""
        await sshfiles.put_file(self, data, path, mode)

    async def _listen(self, conn: asyncssh.SSHClientConnection, key: tuple[str, int], fw: _Forward) -> None:
        listener = None
        if fw.local_port:
            try:
                listener = await conn.forward_local_port("127.0.0.1", fw.local_port, key[0], key[1])
            except OSError:
                listener = None
        if listener is None:
            try:
                listener = await conn.forward_local_port("127.0.0.1", 0, key[0], key[1])
            except (OSError, asyncssh.Error) as e:
                raise HostError(
                    "error", f"cannot forward {key[0]}:{key[1]}: {describe(e)}", target=self.target
                ) from None
        if fw.listener is not None and fw.listener is not listener:
            fw.listener.close()
        fw.listener, fw.conn, fw.local_port = listener, conn, listener.get_port()

    async def _kill_remote(self, pid: int, starttime: str) -> None:
        r = await self.run_script(KILL_SCRIPT, [str(pid), starttime], timeout=15)
        if r.lost or r.timed_out:
            raise HostError("connection-lost", "could not stop the streamed command", target=self.target)
        if r.exit_status != 0:
            log.warning(
                "%s: stopping streamed pid %s: %s",
                self.target,
                pid,
                visible(r.stderr.strip() or f"exit status {r.exit_status}"),
            )

    async def close(self) -> None:
        self._closed = True
        self.state = "closed"
        foreign = self._loop is not None and self._loop is not asyncio.get_running_loop()
        for t in list(self._bg):
            if not foreign:
                t.cancel()
        forwards, self._forwards = list(self._forwards.values()), {}
        conn, self._conn = self._conn, None
        try:
            for fw in forwards:
                if fw.listener is not None:
                    fw.listener.close()
            if conn is not None:
                if foreign:
                    conn.abort()
                else:
                    conn.close()
                    try:
                        await asyncio.wait_for(conn.wait_closed(), 5)
                    except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                        pass
        except RuntimeError:  # objects of an event loop that is closed already
            pass

    def __repr__(self) -> str:
        return f"SshHost({self.target!r}, state={self.state!r})"


__all__ = [
    "SshHost",
    "SshOptions",
]
