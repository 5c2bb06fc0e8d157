"""User key bindings: the ``[keymap]`` table of tunedeck's config file (:mod:`tunedeck.config`).

    [keymap]
    mode-launch = "f2"            # binding id = key(s), comma-separated
    status-toggle-processes = "p,ctrl+p"

Binding ids are listed by ``tunedeck`` in the command palette and in the README. The app applies
the result with ``App.set_keymap``; what the config file holds that tunedeck does not know is shown
in the app as a notification.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunedeck.config import load_config, read_config

if TYPE_CHECKING:
    from textual.app import App


class KeymapError(ValueError):
    """The keymap table is malformed (message names the file and key)."""


def load_keymap(path: Path | None = None) -> dict[str, str]:
    """``{binding id: keys}`` from the config file ({} when there is none)."""
    cfg = read_config(path) if path is not None else load_config()
    if cfg.keymap_error:
        raise KeymapError(cfg.keymap_error)
    return dict(cfg.keymap)


def apply_keymap(app: "App[Any]", keymap: dict[str, str] | None) -> None:
    """Remap ``app``'s bindings by id: ``keymap``, else the config file's ``[keymap]`` (a broken
    one is reported in the app and ignored; so is each table or key the file holds that tunedeck
    does not know)."""
    if keymap is None:
        cfg = load_config()
        for warning in cfg.warnings:
            app.notify(warning, title="config", severity="warning", timeout=10, markup=False)
        if cfg.keymap_error:
            app.notify(f"keymap ignored: {cfg.keymap_error}", severity="error", timeout=10, markup=False)
            return
        keymap = dict(cfg.keymap)
    if keymap:
        app.set_keymap(keymap)
