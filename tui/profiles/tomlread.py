"""Reading a profile or preset file's TOML with errors that name the file, the line and the key.

:func:`parse_toml` refuses nesting that would exhaust tomllib's recursion and turns every
decode failure into a :class:`ProfileError` with its line; :class:`TomlReader` checks a parsed
document key by key; :func:`key_line` finds the line a dotted key is defined on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import AbstractSet, Any, Mapping

import tomllib

from tunedeck.util.safety import ENV_NAME_RE, visible

#: Control characters refused in a profile's text values (a tab is allowed).
CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class ProfileError(ValueError):
    """A profile or preset that cannot be used. ``str()`` reads ``file:line: key: message``."""

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None, key: str = "") -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        self.key = key
        super().__init__(str(self))

    def __str__(self) -> str:
        # file names, keys and messages echo untrusted text: shown escaped, on one line
        where = visible(self.path or "<profile>")
        if self.line:
            where += f":{self.line}"
        key = f" {visible(self.key)}:" if self.key else ""
        return f"{where}:{key} {visible(self.message)}"

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.path, "line": self.line, "key": self.key, "message": self.message}


def key_line(text: str, path: tuple[str, ...]) -> int | None:
    """The 1-based line where the dotted key ``path`` is defined in TOML ``text`` (best effort).

    Tracks ``[table]`` headers; a bare table header counts for a table path.
    """
    want = tuple(path)
    table: tuple[str, ...] = ()
    fallback = None
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?", line)
        if m:
            table = _split_key(m.group(1))
            if table == want:
                return no
            continue
        m = re.match(r"""^((?:"[^"]*"|'[^']*'|[A-Za-z0-9_.\- ]+?))\s*=""", line)
        if m:
            full = table + _split_key(m.group(1))
            if full == want:
                return no
            if want and full[: len(want)] == want and fallback is None:
                fallback = no
            if want and full and full[-1] == want[-1] and fallback is None:
                fallback = no
    return fallback


def _split_key(k: str) -> tuple[str, ...]:
    parts = []
    for m in re.finditer(r'"([^"]*)"|\'([^\']*)\'|([^.\s]+)', k):
        parts.append(next(g for g in m.groups() if g is not None))
    return tuple(parts)


_TOML_POS_RE = re.compile(r"\(at line (\d+), column (\d+)\)")


#: Arrays / inline tables nested deeper than this are refused before tomllib sees them
#: (tomllib recurses per level: ~500 levels raise RecursionError, deeper in a busy stack).
MAX_TOML_DEPTH = 64


def _too_deep(text: str) -> int | None:
    """The line where ``[``/``{`` nesting inside values first exceeds MAX_TOML_DEPTH, else None.

    A tolerant scan (strings and comments skipped); tomllib still does the real parsing."""
    depth = 0
    line = 1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        elif c in "\"'":
            q = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else c
            j = i + len(q)
            while j < n and not text.startswith(q, j):
                if c == '"' and text[j] == "\\":
                    j += 1
                elif text[j] == "\n":
                    if len(q) == 1:
                        break
                    line += 1
                j += 1
            i = j + len(q)
            continue
        elif c in "[{":
            depth += 1
            if depth > MAX_TOML_DEPTH:
                return line
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return None


def parse_toml(text: str, path: str | Path | None) -> dict[str, Any]:
    """The TOML document in ``text``; any failure is a ProfileError naming the file and line."""
    deep = _too_deep(text)
    if deep is not None:
        raise ProfileError(f"TOML nested deeper than {MAX_TOML_DEPTH} levels", path=path, line=deep)
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise ProfileError("TOML nested too deeply to parse", path=path) from None
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = _TOML_POS_RE.search(msg)
        line = int(m.group(1)) if m else None
        key = ""
        if line:
            lines = text.splitlines()
            if 0 < line <= len(lines):
                km = re.match(r"^\s*([^=\[]+?)\s*=", lines[line - 1])
                if km:
                    key = km.group(1).strip()
                else:
                    hm = re.match(r"^\s*\[+([^\]]*)", lines[line - 1])
                    if hm:
                        key = f"[{hm.group(1).strip()}]"
        raise ProfileError(f"TOML syntax error: {msg}", path=path, line=line, key=key) from None
    except (ValueError, OverflowError, MemoryError) as e:  # anything else tomllib lets escape
        raise ProfileError(f"cannot parse TOML: {type(e).__name__}: {e}", path=path) from None


class TomlReader:
    """Validates a parsed TOML document key by key, raising ProfileError with file+line+key."""

    def __init__(self, text: str, path: str | Path | None) -> None:
        self.text = text
        self.path = path

    def err(self, keypath: tuple[str, ...], message: str) -> ProfileError:
        return ProfileError(message, path=self.path, line=key_line(self.text, keypath), key=".".join(keypath))

    def unknown(self, table: Mapping[str, Any], allowed: AbstractSet[str], prefix: tuple[str, ...]) -> None:
        for k in table:
            if k not in allowed:
                hint = ", ".join(sorted(allowed))
                raise self.err(prefix + (k,), f"unknown key (expected one of: {hint})")

    def text_value(self, value: Any, keypath: tuple[str, ...], *, allow_empty: bool = True) -> str:
        if not isinstance(value, str):
            raise self.err(keypath, f"expected a string, got {type(value).__name__}")
        m = CONTROL_RE.search(value)
        if m:
            raise self.err(keypath, f"control character {m.group()!r} is not allowed")
        if not allow_empty and not value:
            raise self.err(keypath, "must not be empty")
        return value

    def int_value(self, value: Any, keypath: tuple[str, ...], lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.err(keypath, f"expected an integer, got {type(value).__name__}")
        if not lo <= value <= hi:
            raise self.err(keypath, f"{value} is out of range {lo}..{hi}")
        return value

    def table(self, value: Any, keypath: tuple[str, ...]) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.err(keypath, f"expected a table, got {type(value).__name__}")
        return value

    def env_table(
        self, value: Any, keypath: tuple[str, ...], *, allow_empty: bool = True
    ) -> tuple[tuple[str, str], ...]:
        out = []
        for k, v in self.table(value, keypath).items():
            if not ENV_NAME_RE.match(k):
                raise self.err(
                    keypath + (k,),
                    f"invalid environment variable name {k!r} (must match [A-Za-z_][A-Za-z0-9_]*)",
                )
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise self.err(keypath + (k,), f"expected a string or number, got {type(v).__name__}")
            sv = v if isinstance(v, str) else str(v)
            self.text_value(sv, keypath + (k,))
            if "\x00" in sv:
                raise self.err(keypath + (k,), "NUL is not allowed")
            out.append((k, sv))
        return tuple(out)


__all__ = [
    "CONTROL_RE",
    "MAX_TOML_DEPTH",
    "ProfileError",
    "TomlReader",
    "key_line",
    "parse_toml",
]
