"""What every part of the benchmark's HTTP client shares (standard library only): the error
types, whose class names are the benchmark's error types (``ConnectError``, ``ReadTimeout``, ...),
origins and URLs, and the timestamped body piece (:data:`Piece`)."""

from __future__ import annotations

from typing import Tuple
from urllib.parse import urlsplit

#: A body piece with the ``perf_counter`` time its read arrived.
Piece = Tuple[float, bytes]


# ====================================================================== errors


class HTTPError(Exception):
    """Any failure of a request; the class name is the error type recorded for it."""


class InvalidURL(HTTPError, ValueError):
    """A URL that cannot be requested: ``'URL': reason``; ``reason`` alone for a caller that quotes
    the URL as its user wrote it."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url!r}: {reason}")
        self.reason = reason


class ConnectError(HTTPError):
    pass


class RemoteProtocolError(HTTPError):
    pass


class TimeoutException(HTTPError):
    pass


class ConnectTimeout(TimeoutException):
    pass


class ReadTimeout(TimeoutException):
    pass


class WriteTimeout(TimeoutException):
    pass


# ====================================================================== URLs


class Origin(Tuple[str, str, int]):
    """``(scheme, host, port)``."""

    __slots__ = ()

    def __new__(cls, scheme: str, host: str, port: int) -> "Origin":
        return tuple.__new__(cls, (scheme, host, port))

    @property
    def scheme(self) -> str:
        return str(self[0])

    @property
    def host(self) -> str:
        return str(self[1])

    @property
    def port(self) -> int:
        return int(self[2])

    def host_header(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return h if self.port == default else f"{h}:{self.port}"


def split_url(url: str) -> Tuple[Origin, str]:
    """``http://h:p/path?q`` → (Origin, ``/path?q``). :class:`InvalidURL` names what is wrong.

    White space and what does not print are refused: ``urlsplit`` drops tabs and line breaks
    without a word, an escape sequence would reach the terminal of whoever reads the URL back, and
    a direction override would show it as another URL."""
    if " " in url or not url.isprintable():
        raise InvalidURL(url, "contains white space or characters that do not print")
    try:
        u = urlsplit(url)
    except ValueError as e:  # a broken [IPv6] host
        raise InvalidURL(url, str(e)) from None
    try:
        port = u.port
    except ValueError:
        port = 0  # not a number, or out of range: said below
    if u.scheme not in ("http", "https"):
        raise InvalidURL(url, "expected an http:// or https:// URL")
    if not u.hostname:
        raise InvalidURL(url, "no host")
    if port is None:
        port = 443 if u.scheme == "https" else 80
    if not 0 < port < 65536:
        raise InvalidURL(url, "the port is not a number from 1 to 65535")
    target = u.path or "/"
    if u.query:
        target += "?" + u.query
    return Origin(u.scheme, u.hostname, port), target


def base_url(url: str) -> str:
    """``http://h:p`` of a server URL, without a trailing ``/v1``."""
    u = url.rstrip("/")
    if u.endswith("/v1"):
        u = u[:-3]
    return u
