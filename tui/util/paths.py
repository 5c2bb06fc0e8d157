"""Where tunedeck keeps things locally (XDG via platformdirs; tests point XDG_* at temp dirs)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "tunedeck"


def _xdg(var: str, fallback: Path) -> Path:
    v = os.environ.get(var)
    return Path(v) / APP if v else fallback


def config_dir() -> Path:
    return _xdg("XDG_CONFIG_HOME", platformdirs.user_config_path(APP))


def data_dir() -> Path:
    return _xdg("XDG_DATA_HOME", platformdirs.user_data_path(APP))


def state_dir() -> Path:
    return _xdg("XDG_STATE_HOME", platformdirs.user_state_path(APP))


def known_hosts_file() -> Path:
    """tunedeck's own known_hosts (hosts trusted with ``tunedeck trust``)."""
    return config_dir() / "known_hosts"
