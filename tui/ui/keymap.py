"""User key bindings: the ``[keymap]`` table of tunedeck's config file.

    [keymap]
    mode-launch = "f2"            # binding id = key(s), comma-separated
    status-toggle-processes = "p,ctrl+p"

The file is ``$TUNEDECK_CONFIG`` when set, else ``./tunedeck.toml``, else
``<config dir>/config.toml`` (``$XDG_CONFIG_HOME/tunedeck``); the first that
exists wins. Binding ids are listed by ``tunedeck`` in the command palette and
in the README. No Textual here: the app applies the result with ``App.set_keymap``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunedeck.util.configfile import config_table

if TYPE_CHECKING:
    from textual.app import App

_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_KEYS = re.compile(r"^[a-z0-9_+,\- ]+$", re.IGNORECASE)


class KeymapError(ValueError):
    """The keymap table is malformed (message names the file and key)."""


def load_keymap(path: Path | None = None) -> dict[str, str]:
    """``{binding id: keys}`` from the config file ({} when there is none)."""
    path, table = config_table("keymap", 'binding-id = "keys"', KeymapError, path)
    out: dict[str, str] = {}
    for key, value in table.items():
        if not _ID.match(key):
            raise KeymapError(f"{path}: keymap.{key}: not a binding id")
        if not isinstance(value, str) or not value.strip() or not _KEYS.match(value):
            raise KeymapError(f'{path}: keymap.{key}: expected keys like "f2" or "ctrl+l,l", got {value!r}')
        out[key] = ",".join(k.strip() for k in value.split(",") if k.strip())
    return out


def apply_keymap(app: "App[Any]", keymap: dict[str, str] | None) -> None:
    """Remap ``app``'s bindings by id: ``keymap``, else the config file's ``[keymap]``; a broken
    one is reported in the app and ignored."""
    if keymap is None:
        try:
            keymap = load_keymap()
        except KeymapError as e:
            app.notify(f"keymap ignored: {e}", severity="error", timeout=10, markup=False)
            return
    if keymap:
        app.set_keymap(keymap)
