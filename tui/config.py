"""tunedeck's config file, read once: its ``[groups]`` of hosts and its ``[keymap]``.

The file is ``$TUNEDECK_CONFIG`` when set, else ``./tunedeck.toml``, else ``<config dir>/config.toml``
(``$XDG_CONFIG_HOME/tunedeck``); the first that exists wins (:func:`tunedeck.util.paths.config_file`)::

    [groups]
    lab = ["gpu-a", "gpuop@gpu-b:2222", "local"]   # --host @lab

    [keymap]
    mode-launch = "f2"                             # binding id = key(s), comma-separated

A table that is wrong is refused on its own (``groups_error`` / ``keymap_error``: one line naming the
file and the key) and the other one still works; a file that cannot be read or is not TOML refuses
both. A table or key tunedeck does not know is not an error: it gives a line in ``warnings`` (logged
once; the command line prints it on stderr, the dashboard shows it). No Textual here.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import tomllib

from tunedeck.hostops.target import parse_target
from tunedeck.util.paths import config_file
from tunedeck.util.safety import UnsafeInput

log = logging.getLogger(__name__)

#: the tables the config file may hold
KNOWN_TABLES = ("groups", "keymap")

_GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_BINDING_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_KEYS = re.compile(r"^[a-z0-9_+,\- ]+$", re.IGNORECASE)

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Config:
    """What the config file says (all empty when there is none)."""

    #: the file read; None when there is none
    path: Path | None = None
    #: ``{name: (target, …)}`` of ``[groups]``
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _EMPTY)
    #: ``{binding id: "key,key"}`` of ``[keymap]``
    keymap: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    #: why ``[groups]`` was refused (one line naming the file and the key); None when it was not
    groups_error: str | None = None
    #: why ``[keymap]`` was refused; None when it was not
    keymap_error: str | None = None
    #: a line per table or key tunedeck does not know
    warnings: tuple[str, ...] = ()


def read_config(path: Path | None) -> Config:
    """The config at ``path`` (an empty one when it is None or no file). Never raises: what is
    wrong is in the result's ``*_error`` and ``warnings``."""
    if path is None or not path.is_file():
        return Config(path=None)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        return _unusable(path, f"{path}: cannot read: {e}")
    except tomllib.TOMLDecodeError as e:
        return _unusable(path, f"{path}: {e}")
    warnings = tuple(_unknown(path, data))
    for w in warnings:
        log.warning("%s", w)
    groups, groups_error = _groups(path, data.get("groups", {}))
    keymap, keymap_error = _keymap(path, data.get("keymap", {}))
    for err in (groups_error, keymap_error):
        if err:
            log.warning("config refused: %s", err)
    return Config(
        path=path,
        groups=MappingProxyType(groups),
        keymap=MappingProxyType(keymap),
        groups_error=groups_error,
        keymap_error=keymap_error,
        warnings=warnings,
    )


_cache: dict[tuple[str, int, int], Config] = {}


def load_config() -> Config:
    """The config file's :class:`Config`, read once (again only when the file changes)."""
    path = config_file()
    if path is None:
        return Config()
    try:
        st = path.stat()
    except OSError:
        return read_config(path)  # gone or unreadable: read_config says which
    key = (str(path), st.st_mtime_ns, st.st_size)
    cfg = _cache.get(key)
    if cfg is None:
        cfg = read_config(path)
        _cache.clear()
        _cache[key] = cfg
    return cfg


def _unusable(path: Path, message: str) -> Config:
    log.warning("config file not used: %s", message)
    return Config(path=path, groups_error=message, keymap_error=message)


def _unknown(path: Path, data: Mapping[str, Any]) -> list[str]:
    known = ", ".join(KNOWN_TABLES)
    out = []
    for key, value in data.items():
        if key in KNOWN_TABLES:
            continue
        what = f"table [{key}]" if isinstance(value, dict) and _GROUP.match(key) else f"key {key!r}"
        out.append(f"{path}: unknown {what} (known: {known})")
    return out


def _groups(path: Path, table: Any) -> tuple[dict[str, tuple[str, ...]], str | None]:
    if not isinstance(table, dict):
        return {}, f'{path}: [groups] must be a table of name = ["target", …]'
    out: dict[str, tuple[str, ...]] = {}
    for name, members in table.items():
        if not _GROUP.match(name):
            return {}, f"{path}: groups.{name}: not a group name (letters, digits, '.', '_', '-')"
        if not isinstance(members, list) or not members or not all(isinstance(m, str) for m in members):
            return {}, f'{path}: groups.{name}: expected a list of targets like ["gpu-a", "gpu-b"]'
        for m in members:
            try:
                parse_target(m)
            except UnsafeInput as e:
                return {}, f"{path}: groups.{name}: {e}"
        out[name] = tuple(members)
    return out, None


def _keymap(path: Path, table: Any) -> tuple[dict[str, str], str | None]:
    if not isinstance(table, dict):
        return {}, f'{path}: [keymap] must be a table of binding-id = "keys"'
    out: dict[str, str] = {}
    for key, value in table.items():
        if not _BINDING_ID.match(key):
            return {}, f"{path}: keymap.{key}: not a binding id"
        if not isinstance(value, str) or not value.strip() or not _KEYS.match(value):
            return {}, f'{path}: keymap.{key}: expected keys like "f2" or "ctrl+l,l", got {value!r}'
        out[key] = ",".join(k.strip() for k in value.split(",") if k.strip())
    return out, None
