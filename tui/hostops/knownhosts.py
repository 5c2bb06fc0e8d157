"""Trusted host keys: tunedeck's own known_hosts, then the user's ``~/.ssh/known_hosts``."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Sequence

import asyncssh

from tunedeck.hostops.hosts import HostError
from tunedeck.hostops.sshconfig import Endpoint, is_ip
from tunedeck.util.paths import known_hosts_file


def known_hosts_files() -> list[Path]:
    """tunedeck's own known_hosts, then the user's; only files that exist."""
    files = [known_hosts_file(), Path.home() / ".ssh" / "known_hosts"]
    return [f for f in files if f.is_file()]


def load_known_hosts(files: Sequence[Path] | None = None) -> asyncssh.SSHKnownHosts:
    """One SSHKnownHosts from all files (an empty object still means 'verify')."""
    files = known_hosts_files() if files is None else files
    parts = []
    for f in files:
        try:
            parts.append(f.read_text(errors="replace"))
        except OSError as e:
            raise HostError("error", f"cannot read known_hosts file {f}: {e.strerror}") from None
    try:
        return asyncssh.import_known_hosts("\n".join(parts))
    except (ValueError, asyncssh.KeyImportError) as e:
        raise HostError("error", f"cannot parse known_hosts ({', '.join(map(str, files))}): {e}") from None


async def _peer_addr(host: str, port: int) -> str:
    if is_ip(host):
        return host
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return ""
    return str(infos[0][4][0]) if infos else ""


async def known_keys_for(ep: Endpoint, files: Sequence[Path] | None = None) -> list[tuple[Path, asyncssh.SSHKey]]:
    """(file, key) for every trusted key recorded for ``ep`` (hashed names included)."""
    files = known_hosts_files() if files is None else files
    addr = await _peer_addr(ep.host, ep.port)
    out: list[tuple[Path, asyncssh.SSHKey]] = []
    for f in files:
        kh = load_known_hosts([f])
        keys = kh.match(ep.host, addr, ep.port if ep.port != 22 else None)[0]
        for k in keys:
            if not any(f2 == f and k2.public_data == k.public_data for f2, k2 in out):
                out.append((f, k))
    return out


def fingerprint(key: asyncssh.SSHKey) -> str:
    return key.get_fingerprint("sha256")


def key_type_label(key: asyncssh.SSHKey) -> str:
    alg = key.get_algorithm()
    return {"ssh-ed25519": "ED25519", "ssh-rsa": "RSA"}.get(alg, alg.upper())
