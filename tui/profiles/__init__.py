"""Server profiles, presets and the command builder (TOML).

The entry points other parts use::

    from tui.profiles import load_profile, build_command
    cmd = build_command(load_profile("sglang-tuned"), demo=False)   # Command(argv, env, display, …)

Modules: :mod:`~tui.profiles.model` (dataclasses, the TOML document), :mod:`~tui.profiles.profileread`
(TOML parsing, errors with file/line/key),
:mod:`~tui.profiles.store` (discovery order, saving), :mod:`~tui.profiles.presets`,
:mod:`~tui.profiles.schema` (flag allowlist, backend tables), :mod:`~tui.profiles.builder`,
:mod:`~tui.profiles.diff`, :mod:`~tui.profiles.preflight`.
"""

from __future__ import annotations

from pathlib import Path

from tui.profiles.builder import Command, Issue, build_command, check_profile
from tui.profiles.model import ProfileError, ServerProfile, Speculative
from tui.profiles.profileread import load_profile_file


def load_profile(name: str) -> ServerProfile:
    """The profile called ``name`` (user folder first, then built-ins), or a ``.toml`` file path."""
    if name.endswith(".toml") and Path(name).is_file():
        return load_profile_file(name, source="file")
    from tui.profiles.store import ProfileStore

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
