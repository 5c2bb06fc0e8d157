"""Trust on first use, confirmed by the user: ``tunedeck trust TARGET``.

The server's host key is fetched (no login), its SHA256 fingerprint shown, and
only after an explicit yes a single line ``[host]:port type base64`` (``host
type base64`` for port 22) is appended, atomically, to tunedeck's own
known_hosts (``tunedeck.util.paths.known_hosts_file()``). A host that already has a
DIFFERENT key recorded (in tunedeck's file or ``~/.ssh/known_hosts``) is a
mismatch: refused, never overridden here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from tunedeck.hostops.hosts import HostError
from tunedeck.hostops.knownhosts import fingerprint, key_type_label, known_keys_for
from tunedeck.hostops.sshconfig import Endpoint, resolve_endpoint
from tunedeck.hostops.sshgate import fetch_host_key
from tunedeck.hostops.target import Target
from tunedeck.util.files import atomic_write_text
from tunedeck.util.paths import known_hosts_file


@dataclass
class TrustCheck:
    """What ``tunedeck trust`` found before asking the user."""

    endpoint: Endpoint
    key: asyncssh.SSHKey
    #: ``unknown`` (may be trusted), ``trusted`` (already known, same key) or ``mismatch``.
    status: str
    known: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)

    @property
    def key_type(self) -> str:
        return key_type_label(self.key)

    @property
    def line(self) -> str:
        """The known_hosts line that trusting would append."""
        data = self.key.export_public_key("openssh").decode().split()
        return f"{self.endpoint.known_hosts_name} {data[0]} {data[1]}"

    def as_dict(self) -> dict[str, object]:
        return {
            "target": self.endpoint.alias,
            "host": self.endpoint.host,
            "port": self.endpoint.port,
            "key_type": self.key.get_algorithm(),
            "fingerprint": self.fingerprint,
            "status": self.status,
            "known_fingerprints": [{"file": str(f), "fingerprint": fp} for f, fp in self.known],
            "known_hosts_file": str(known_hosts_file()),
        }


async def check_host(target: Target | str, *, timeout: float = 20.0) -> TrustCheck:
    """Fetch the server's key and compare it with what is already trusted."""
    ep = resolve_endpoint(target)
    key = await fetch_host_key(ep, timeout=timeout)
    known = await known_keys_for(ep)
    blob = key.public_data
    if any(k.public_data == blob for _, k in known):
        status = "trusted"
    elif known:
        status = "mismatch"
    else:
        status = "unknown"
    return TrustCheck(ep, key, status, [(f, fingerprint(k)) for f, k in known])


def add_trusted(check: TrustCheck) -> Path:
    """Append exactly one line for an ``unknown`` host to tunedeck's known_hosts (atomic)."""
    if check.status != "unknown":
        raise HostError(
            "hostkey-mismatch" if check.status == "mismatch" else "error",
            f"refusing to add a key for {check.endpoint.known_hosts_name}: status is {check.status}",
        )
    path = known_hosts_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        old = path.read_text()
    except FileNotFoundError:
        old = ""
    if old and not old.endswith("\n"):
        old += "\n"
    atomic_write_text(path, old + check.line + "\n", mode=0o600)
    try:
        os.chmod(path, 0o600)
    except OSError:
        pass
    return path


__all__ = ["TrustCheck", "add_trusted", "check_host"]
