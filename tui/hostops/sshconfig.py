"""Where a TARGET connects: the subset of ``~/.ssh/config`` tunedeck reads.

Only HostName, User, Port and IdentityFile are read (:func:`read_ssh_config`); the
file is never handed to asyncssh, whose other options could switch host key
checking off. :func:`resolve_endpoint` applies them to a TARGET and validates the
result.
"""

from __future__ import annotations

import fnmatch
import getpass
import glob
import ipaddress
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tunedeck.hostops.target import HOSTNAME_RE, USER_RE, Target, parse_target
from tunedeck.util.safety import UnsafeInput

DEFAULT_KEY_NAMES = ("id_ed25519", "id_rsa", "id_ecdsa")


def _config_tokens(value: str) -> list[str]:
    try:
        return shlex.split(value, comments=False, posix=True)
    except ValueError:
        return value.split()


def _host_matches(name: str, patterns: Sequence[str]) -> bool:
    name = name.lower()
    matched = False
    for pat in patterns:
        neg = pat.startswith("!")
        p = pat[1:] if neg else pat
        if fnmatch.fnmatchcase(name, p.lower()):
            if neg:
                return False
            matched = True
    return matched


def read_ssh_config(alias: str, path: Path | None = None) -> dict[str, object]:
    """HostName, User, Port and IdentityFile for ``alias`` from an OpenSSH client config.

    Only these four keywords are read: options that change host key checking
    (UserKnownHostsFile, StrictHostKeyChecking, ...) or forwarding are ignored
    on purpose. ``Match`` blocks are skipped (except ``Match all``); ``Include``
    is followed. First value wins, as in ssh(1). Keys are lower-case; the value
    of ``identityfile`` is a list.
    """
    home = Path.home()
    path = path or home / ".ssh" / "config"
    result: dict[str, object] = {}

    def parse(p: Path, depth: int) -> None:
        if depth > 8:
            return
        try:
            lines = p.read_text(errors="replace").splitlines()
        except OSError:
            return
        active = True
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(r"^(\S+?)(?:\s*=\s*|\s+)(.*)$", line)
            if not m:
                continue
            key, value = m.group(1).lower(), m.group(2).strip()
            if key == "host":
                active = _host_matches(alias, _config_tokens(value))
                continue
            if key == "match":
                active = value.strip().lower() == "all"
                continue
            if not active:
                continue
            if key == "include":
                for pat in _config_tokens(value):
                    pat = os.path.expanduser(pat)
                    if not os.path.isabs(pat):
                        pat = str(home / ".ssh" / pat)
                    for inc in sorted(glob.glob(pat)):
                        parse(Path(inc), depth + 1)
                continue
            toks = _config_tokens(value)
            if not toks:
                continue
            if key == "identityfile":
                result.setdefault("identityfile", [])
                assert isinstance(result["identityfile"], list)
                result["identityfile"].append(toks[0])
            elif key in ("hostname", "user", "port") and key not in result:
                result[key] = toks[0]

    parse(path, 0)
    return result


def _expand_tokens(value: str, *, alias: str, host: str, user: str, port: int) -> str:
    local_user = _local_user()
    repl = {
        "%%": "%",
        "%h": host,
        "%n": alias,
        "%r": user,
        "%u": local_user,
        "%p": str(port),
        "%d": str(Path.home()),
    }
    out = re.sub(r"%[%hnrupd]", lambda m: repl[m.group()], value)
    return os.path.expanduser(out)


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # pragma: no cover - no passwd entry and no LOGNAME
        return "root" if os.geteuid() == 0 else "user"


@dataclass(frozen=True)
class Endpoint:
    """Where a TARGET really connects: host name/address, port, user, key files."""

    alias: str
    host: str
    port: int
    user: str
    identity_files: tuple[str, ...] = ()

    @property
    def known_hosts_name(self) -> str:
        """The host field of a known_hosts line for this endpoint."""
        h = self.host
        return h if self.port == 22 else f"[{h}]:{self.port}"

    def __str__(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{h}:{self.port}"


def resolve_endpoint(target: Target | str) -> Endpoint:
    """Apply ``~/.ssh/config`` (HostName/User/Port/IdentityFile only) to a TARGET."""
    t = parse_target(target) if isinstance(target, str) else target
    cfg = read_ssh_config(t.host)
    host = str(cfg.get("hostname") or t.host)
    port_s = cfg.get("port")
    port = t.port or (int(port_s) if isinstance(port_s, str) and port_s.isdigit() else 22)
    user = t.user or str(cfg.get("user") or _local_user())
    host = _expand_tokens(host, alias=t.host, host=t.host, user=user, port=port)
    if host.startswith("-") or not (HOSTNAME_RE.match(host) or is_ip(host)):
        raise UnsafeInput(f"~/.ssh/config: HostName {host!r} for {t.host!r} is not a valid host name")
    if not USER_RE.match(user):
        raise UnsafeInput(f"~/.ssh/config: User {user!r} for {t.host!r} is not a valid user name")
    if not (0 < port < 65536):
        raise UnsafeInput(f"~/.ssh/config: Port {port} for {t.host!r} is out of range")
    files: list[str] = []
    identity = cfg.get("identityfile")
    for f in identity if isinstance(identity, list) else ():
        files.append(_expand_tokens(str(f), alias=t.host, host=host, user=user, port=port))
    for name in DEFAULT_KEY_NAMES:
        files.append(str(Path.home() / ".ssh" / name))
    seen: list[str] = []
    for f in files:
        if f not in seen and os.path.isfile(f):
            seen.append(f)
    return Endpoint(alias=str(t), host=host, port=port, user=user, identity_files=tuple(seen))


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
