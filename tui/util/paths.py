"""Where tunedeck keeps things (XDG via platformdirs; tests point XDG_* at temp dirs).

On a GPU host the shipped runtime calls :func:`use_home` first, so everything it
writes (results, journal, run records) stays under ``${TUNEDECK_HOME}``.
"""

from __future__ import annotations

import os
from pathlib import Path

APP = "tunedeck"

_home: Path | None = None


def use_home(root: Path) -> None:
    """Keep config, data and state under ``root`` (the host-side runtime's ``${TUNEDECK_HOME}``)."""
    global _home
    _home = Path(root)


def _dir(kind: str, var: str) -> Path:
    if _home is not None:
        return _home / kind
    v = os.environ.get(var)
    if v:
        return Path(v) / APP
    import platformdirs  # laptop only: the host-side runtime has set a home above

    return Path(getattr(platformdirs, f"user_{kind}_path")(APP))


def config_dir() -> Path:
    return _dir("config", "XDG_CONFIG_HOME")


def data_dir() -> Path:
    return _dir("data", "XDG_DATA_HOME")


def state_dir() -> Path:
    return _dir("state", "XDG_STATE_HOME")


def known_hosts_file() -> Path:
    """tunedeck's own known_hosts (hosts trusted with ``tunedeck trust``)."""
    return config_dir() / "known_hosts"


def config_file() -> Path | None:
    """The config file: ``$TUNEDECK_CONFIG``, else ``./tunedeck.toml``, else the config dir's ``config.toml``."""
    env = os.environ.get("TUNEDECK_CONFIG")
    if env:
        return Path(env)
    for p in (Path("tunedeck.toml"), config_dir() / "config.toml"):
        if p.is_file():
            return p
    return None
