"""Server profiles, presets and the command builder (TOML).

The entry points other parts use::

    from tunedeck.profiles import load_profile, build_command
    cmd = build_command(load_profile("sglang-tuned"), demo=False)   # Command(argv, env, display, …)

Modules: :mod:`~tunedeck.profiles.model` (dataclasses, the TOML document), :mod:`~tunedeck.profiles.profileread`
(TOML parsing, errors with file/line/key),
:mod:`~tunedeck.profiles.store` (discovery order, saving), :mod:`~tunedeck.profiles.presets`,
:mod:`~tunedeck.profiles.schema` (flag allowlist, backend tables), :mod:`~tunedeck.profiles.builder`,
:mod:`~tunedeck.profiles.diff`, :mod:`~tunedeck.profiles.preflight`.
"""

from __future__ import annotations

from pathlib import Path

from tunedeck.profiles.builder import Command, Issue, build_command, check_profile
from tunedeck.profiles.model import ProfileError, ServerProfile, Speculative
from tunedeck.profiles.profileread import load_profile_file


def load_profile(name: str) -> ServerProfile:
    """The profile called ``name`` (user folder first, then built-ins), or a ``.toml`` file path."""
    if name.endswith(".toml") and Path(name).is_file():
        return load_profile_file(name, source="file")
    from tunedeck.profiles.store import ProfileStore

    return ProfileStore().get(name)


__all__ = [
    "Command",
    "Issue",
    "ProfileError",
    "ServerProfile",
    "Speculative",
    "build_command",
    "check_profile",
    "load_profile",
]
