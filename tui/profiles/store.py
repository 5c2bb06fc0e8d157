"""Where profiles live, how they are found, and how they are saved.

Discovery order (the first hit for a name wins):

1. **User folder**: ``$TUNEDECK_PROFILES`` when set (tests point it at their own folder), else
   ``<config dir>/profiles/`` (``$XDG_CONFIG_HOME/tunedeck/profiles`` or the platformdirs
   config path, e.g. ``~/.config/tunedeck/profiles``).
2. **Built-ins** shipped with tunedeck: ``tunedeck/builtin_profiles/`` inside an installed wheel
   (pyproject.toml maps the repository's ``profiles/`` there), else the repository's
   ``profiles/`` folder (editable or source checkout).

In each folder a server profile is ``NAME.toml`` directly in it or in ``servers/``; presets are
``presets/*.toml`` (see :mod:`tunedeck.profiles.presets`). A user profile or preset with the name of a
built-in shadows it. Built-ins are read-only: saving one is refused, "save as" writes a user copy
(to keep the built-in's name it must be asked for explicitly: ``shadow_builtin=True``).

Saving writes TOML through :func:`tunedeck.util.files.atomic_write_text` (temp file in the same
folder, fsync, atomic replace), keeps the previous version as ``NAME.toml.bak``, and never
replaces a file that does not parse (the user's hand edits would be lost). A new file is written
with tomli-w; an existing one is updated in place (:func:`tunedeck.util.tomledit.updated_toml`), so the
user's comments, key order and formatting survive a save from the form.
"""

from __future__ import annotations

import difflib
import logging
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, TypeVar

import tunedeck
from tunedeck.profiles.model import (
    NAME_RE,
    AttentionPreset,
    NcclPreset,
    ProfileError,
    ServerProfile,
    profile_to_dict,
    profile_to_toml,
)
from tunedeck.profiles.presets import DEFAULT_NCCL, load_preset_file
from tunedeck.profiles.profileread import load_profile_file
from tunedeck.util.files import atomic_write_text, remove_stale_temps
from tunedeck.util.paths import config_dir
from tunedeck.util.safety import is_secret_name
from tunedeck.util.tomledit import updated_toml

ENV_VAR = "TUNEDECK_PROFILES"

log = logging.getLogger(__name__)

T = TypeVar("T")


def _broken(f: Path, e: BaseException) -> ProfileError:
    """A file that failed in a way the loader did not foresee: still one broken file, never a crash."""
    log.warning("cannot load %s", f, exc_info=e)
    return ProfileError(f"cannot load: {type(e).__name__}: {e}", path=f)


#: what a loader may raise on a fault it did not foresee in a file (:func:`_broken`)
_UNFORESEEN = (RecursionError, MemoryError, ValueError, TypeError, KeyError, AttributeError)


def _read_file(f: Path, read: Callable[[Path], T], what: str, errors: list[ProfileError]) -> T | None:
    """``read(f)``, or None with the file's error added to ``errors``: a broken file is skipped,
    never a crash."""
    try:
        return read(f)
    except ProfileError as e:
        log.info("broken %s skipped: %s", what, e)
        errors.append(e)
    except _UNFORESEEN as e:
        errors.append(_broken(f, e))
    return None


def builtin_root() -> Path:
    """The shipped profiles: inside the wheel, else ``<repo>/profiles``."""
    pkg = Path(tunedeck.__file__).resolve().parent
    wheel = pkg / "builtin_profiles"
    if wheel.is_dir():
        return wheel
    return pkg.parent / "profiles"


def user_root() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return config_dir() / "profiles"


@dataclass(frozen=True, slots=True)
class Listing:
    """Everything found: usable profiles (user first, shadowing) and the files that failed."""

    profiles: tuple[ServerProfile, ...]
    shadowed: tuple[ServerProfile, ...]
    errors: tuple[ProfileError, ...]


def _server_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for d in (root, root / "servers"):
        if d.is_dir():
            files += sorted(p for p in d.glob("*.toml") if not p.name.startswith("."))
    return files


class ProfileStore:
    """Profiles and presets from the user folder and the built-ins."""

    def __init__(self, *, user: Path | None = None, builtin: Path | None = None) -> None:
        self.user = Path(user) if user is not None else user_root()
        self.builtin = Path(builtin) if builtin is not None else builtin_root()
        # a save killed mid-write (kill -9, power loss) leaves ``.NAME.toml.XXXX.tmp``: clear them at startup
        for d in (self.user, self.user / "servers"):
            remove_stale_temps(d)

    # ------------------------------------------------------------------ server profiles
    def listing(self) -> Listing:
        found: dict[str, ServerProfile] = {}
        shadowed: list[ServerProfile] = []
        errors: list[ProfileError] = []
        for root, source in ((self.user, "user"), (self.builtin, "builtin")):
            for f in _server_files(root):
                p = _read_file(f, partial(load_profile_file, source=source), "profile", errors)
                if p is None:
                    continue
                if p.name in found:
                    shadowed.append(p)
                else:
                    found[p.name] = p
        return Listing(tuple(found.values()), tuple(shadowed), tuple(errors))

    def names(self) -> list[str]:
        return sorted(p.name for p in self.listing().profiles)

    def _file_names(self) -> list[str]:
        """The names the profile files have (without reading them), user ones first."""
        return list(dict.fromkeys(f.stem for root in (self.user, self.builtin) for f in _server_files(root)))

    def builtin_names(self) -> set[str]:
        return {f.stem for f in _server_files(self.builtin)}

    def _find_file(self, name: str) -> tuple[Path, str] | None:
        for root, source in ((self.user, "user"), (self.builtin, "builtin")):
            for d in (root, root / "servers"):
                f = d / f"{name}.toml"
                if f.is_file():
                    return f, source
        return None

    def get(self, name: str) -> ServerProfile:
        """The profile called ``name``; a broken file raises its ProfileError (file, line, key)."""
        if not NAME_RE.match(name):
            raise ProfileError(f"invalid profile name {name!r}", key="name")
        hit = self._find_file(name)
        if hit is None:
            near = difflib.get_close_matches(name, self._file_names(), n=1, cutoff=0.6)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise ProfileError(
                f"no profile named {name!r} ({hint}looked in {self.user} and {self.builtin}; "
                "see `tunedeck profiles list`)",
                key="name",
            )
        try:
            return load_profile_file(hit[0], source=hit[1])
        except _UNFORESEEN as e:
            if isinstance(e, ProfileError):
                raise
            raise _broken(hit[0], e) from None

    def save(
        self,
        profile: ServerProfile,
        *,
        name: str | None = None,
        overwrite: bool = False,
        shadow_builtin: bool = False,
    ) -> ServerProfile:
        """Write ``profile`` into the user folder; returns it as loaded back from disk.

        ``name`` given = "save as". Without it, saving a built-in is refused (read-only).
        An existing user file is replaced only when it is this profile's own file or
        ``overwrite`` is set, and never when it does not parse.
        """
        target_name = name or profile.name
        if not NAME_RE.match(target_name):
            raise ProfileError(
                f"invalid profile name {target_name!r} (letters, digits, '.', '_', '-'; at most 64)",
                key="name",
            )
        if name is None and profile.source == "builtin":
            raise ProfileError(
                f"built-in profile {profile.name!r} is read-only; use save as to write a user copy",
                path=profile.path or None,
                key="name",
            )
        if target_name in self.builtin_names() and not shadow_builtin:
            raise ProfileError(
                f"{target_name!r} is a built-in profile name; choose another name "
                "or save it explicitly as a user copy that shadows the built-in",
                key="name",
            )
        target = self.user / f"{target_name}.toml"
        existing = self._find_file(target_name)
        if existing and existing[1] == "user":
            target = existing[0]
        own = bool(profile.path) and profile.source == "user" and Path(profile.path) == target
        if target.exists():
            if not (own or overwrite):
                raise ProfileError(
                    f"a user profile named {target_name!r} already exists; choose another name or overwrite it",
                    path=target,
                    key="name",
                )
            try:
                load_profile_file(target)
            except ProfileError as e:
                raise ProfileError(
                    f"refusing to overwrite a file that does not parse ({e}); fix or move it first",
                    path=target,
                    line=e.line,
                    key=e.key,
                ) from None
        new = profile.with_(name=target_name, source="user", path=str(target))
        # a file the user wrote keeps its comments, order and formatting: only what changed is rewritten
        if target.exists():
            before = profile_to_dict(load_profile_file(target, source="user"))
            text = updated_toml(target.read_text(encoding="utf-8"), before, profile_to_dict(new))
        else:
            text = profile_to_toml(new)
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(target.parent)
        # anything that looks like a secret (HF_TOKEN, --api-key, …) is readable by the owner only
        secret = any(is_secret_name(k) for k, _ in new.env) or any(is_secret_name(k) for k, _ in new.flags)
        mode = 0o600 if secret else 0o644
        if target.exists():
            atomic_write_text(target.with_name(target.name + ".bak"), target.read_text(encoding="utf-8"), mode=mode)
        atomic_write_text(target, text, mode=mode)
        return load_profile_file(target, source="user")

    def delete(self, name: str) -> Path:
        hit = self._find_file(name)
        if hit is None:
            raise ProfileError(f"no profile named {name!r}", key="name")
        if hit[1] == "builtin":
            raise ProfileError(f"built-in profile {name!r} is read-only", path=hit[0], key="name")
        hit[0].unlink()
        return hit[0]

    # ------------------------------------------------------------------ presets
    def _presets(self) -> tuple[list[NcclPreset], list[AttentionPreset], list[ProfileError]]:
        nccl: dict[str, NcclPreset] = {}
        att: dict[tuple[str, str], AttentionPreset] = {}
        errors: list[ProfileError] = []
        for root, source in ((self.user, "user"), (self.builtin, "builtin")):
            d = root / "presets"
            if not d.is_dir():
                continue
            for f in sorted(d.glob("*.toml")):
                got = _read_file(f, partial(load_preset_file, source=source), "preset file", errors)
                if got is None:
                    continue
                n, a = got
                for np_ in n:
                    nccl.setdefault(np_.name, np_)
                for ap in a:
                    att.setdefault((ap.engine, ap.name), ap)
        nccl.setdefault("default", DEFAULT_NCCL)
        order = ["default", "pcie", "nvlink", "debug"]
        nl = sorted(nccl.values(), key=lambda p: (order.index(p.name) if p.name in order else 99, p.name))
        return nl, list(att.values()), errors

    def nccl_presets(self) -> list[NcclPreset]:
        return self._presets()[0]

    def nccl_preset(self, name: str) -> NcclPreset:
        for p in self.nccl_presets():
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.nccl_presets())
        raise ProfileError(f"unknown NCCL preset {name!r} (known: {known})", key="nccl.preset")

    def attention_presets(self, engine: str | None = None) -> list[AttentionPreset]:
        return [p for p in self._presets()[1] if engine is None or p.engine == engine]

    def preset_errors(self) -> list[ProfileError]:
        return self._presets()[2]
