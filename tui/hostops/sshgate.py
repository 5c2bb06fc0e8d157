"""Who may try an SSH connection, and how a failed one is described.

* at most :data:`MAX_HANDSHAKES` handshakes in flight per event loop: sshd's ``MaxStartups``
  resets handshakes beyond 10, and one dashboard may open several hosts at once;
* a refusal no retry can fix (an unknown or changed host key, bad credentials) is remembered
  per endpoint for the process: every later caller (GPU poller, host stats, run list, log
  tail) gets it at once, without connecting, until the user acts (``r``, ``tunedeck trust``)
  or the files behind the refusal change (the known_hosts files, the key files);
* :func:`describe` turns a connect/channel exception into the short text the user sees.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import weakref
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from tunedeck.hostops.hosts import HostError
from tunedeck.hostops.sshconfig import Endpoint
from tunedeck.util.paths import known_hosts_file

log = logging.getLogger(__name__)

#: Concurrent SSH handshakes per event loop (sshd MaxStartups resets beyond 10).
MAX_HANDSHAKES = 3

#: Errors no retry can fix: only the user can (trust the key, fix the credentials, press ``r``).
PERMANENT_KINDS = ("hostkey-unknown", "hostkey-mismatch", "auth-failed")

_HANDSHAKES: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" = weakref.WeakKeyDictionary()


def handshake_slot() -> asyncio.Semaphore:
    """This event loop's handshake semaphore (made on first use, sized by :data:`MAX_HANDSHAKES`)."""
    loop = asyncio.get_running_loop()
    sem = _HANDSHAKES.get(loop)
    if sem is None:
        sem = _HANDSHAKES[loop] = asyncio.Semaphore(MAX_HANDSHAKES)
    return sem


# ====================================================================== remembered refusals


@dataclass
class _Block:
    error: HostError
    signature: tuple[tuple[str, str], ...]


#: (host, port, user) -> the permanent failure that stops every connection attempt to it
_BLOCKED: dict[tuple[str, int, str], _Block] = {}


def _signature(ep: Endpoint) -> tuple[tuple[str, str], ...]:
    """What the user changes to fix a permanent failure: the known_hosts files (``tunedeck
    trust``, an edit) and the key files (by content: small files, and an mtime can repeat)."""
    out = []
    for f in [known_hosts_file(), Path.home() / ".ssh" / "known_hosts", *map(Path, ep.identity_files)]:
        try:
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
        except OSError:
            digest = "-"
        out.append((str(f), digest))
    return tuple(out)


def _block_key(ep: Endpoint) -> tuple[str, int, str]:
    return (ep.host, ep.port, ep.user)


def remember_refusal(ep: Endpoint, error: HostError) -> bool:
    """Remember ``error`` for ``ep`` when it is one no retry can fix; True when remembered."""
    if error.kind not in PERMANENT_KINDS:
        return False
    _BLOCKED[_block_key(ep)] = _Block(error, _signature(ep))
    return True


def remembered_refusal(ep: Endpoint) -> HostError | None:
    """The refusal remembered for ``ep``, or None: none, or the files behind it changed since
    (then it is forgotten, and the next attempt connects)."""
    block = _BLOCKED.get(_block_key(ep))
    if block is None:
        return None
    if block.signature != _signature(ep):
        log.info("%s:%d: known_hosts or key files changed; trying again", ep.host, ep.port)
        _BLOCKED.pop(_block_key(ep), None)
        return None
    return block.error


def clear_block(ep: Endpoint) -> None:
    """The user acted (``r``, ``tunedeck trust``): allow one new attempt to this endpoint."""
    _BLOCKED.pop(_block_key(ep), None)


# ====================================================================== describing failures


def describe(e: BaseException) -> str:
    """A connect/channel exception as the short text the user sees."""
    if isinstance(e, asyncssh.DisconnectError):
        return e.reason or type(e).__name__
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, socket.gaierror):
        return f"name lookup failed ({e.strerror or e})"
    if isinstance(e, (TimeoutError, asyncio.TimeoutError)):
        return "timed out"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


# ====================================================================== host keys


async def fetch_host_key(ep: Endpoint, *, timeout: float = 20.0) -> asyncssh.SSHKey:
    """The key the server presents (no authentication, no trust decision)."""
    async with handshake_slot():
        try:
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(ep.host, ep.port, config=[]),
                timeout + 2,
            )
        except (OSError, asyncio.TimeoutError, asyncssh.Error) as e:
            raise HostError("unreachable", f"cannot fetch the host key of {ep.host}:{ep.port}: {describe(e)}") from None
    if key is None:
        raise HostError("error", f"{ep.host}:{ep.port} presented no host key")
    return key


__all__ = [
    "MAX_HANDSHAKES",
    "PERMANENT_KINDS",
    "clear_block",
    "describe",
    "fetch_host_key",
    "handshake_slot",
    "remember_refusal",
    "remembered_refusal",
]
