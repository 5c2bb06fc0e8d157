"""A host as the user names it (``--host``, a run record, the config file): ``local``,
``[user@]host[:port]``, ``[user@][v6addr]:port`` or an ``~/.ssh/config`` alias, parsed into a
:class:`Target` or refused with one line."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tunedeck.util.safety import UnsafeInput, check_text

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


__all__ = ["HOSTNAME_RE", "USER_RE", "Target", "parse_target"]
