"""The dashboard's modes (Status / Launch / Bench / Compare / Tune): each a top-level screen with
its key, named ``module:Class`` in :data:`MODE_REGISTRY`, offered when its screen can be built.

Adding a screen: one line in :data:`MODE_REGISTRY` (creating the module is then enough; its key
is one of the app's bindings, :func:`mode_bindings`). A mode is
offered when its module imports and its screen can be built with no arguments, or only with the
keywords ``host`` / ``demo``, which the app fills in (``app.host``, ``app.demo``); otherwise its
key is hidden. A screen whose module fails to import opens a :class:`ScreenFailed` saying so."""

from __future__ import annotations

import importlib
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Callable

from textual.binding import Binding
from textual.screen import Screen

from tunedeck.ui.screens.failed import ScreenFailed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModeSpec:
    """A top-level screen: title, the key that opens it, and ``module:Class`` of its screen; the
    key's tooltip, and whether the footer shows it."""

    title: str
    key: str
    screen: str | Callable[..., Screen[Any]]
    tooltip: str = ""
    footer: bool = True


#: mode name → how to build its screen. Other screens plug in with one line here;
#: a ``module:Class`` whose module does not exist yet is simply not offered.
MODE_REGISTRY: dict[str, ModeSpec] = {
    "status": ModeSpec("Status", "s", "tunedeck.ui.screens.status:StatusScreen", "GPUs, host and servers"),
    "launch": ModeSpec("Launch", "l", "tunedeck.ui.screens.profiles:ProfilesScreen", "Profiles and the launch form"),
    "bench": ModeSpec("Bench", "b", "tunedeck.ui.screens.bench_setup:BenchSetupScreen", "Benchmarks with live charts"),
    "compare": ModeSpec("Compare", "c", "tunedeck.ui.screens.compare:CompareScreen", "A/B comparison"),
    "tune": ModeSpec(
        "Tune",
        "T",
        "tunedeck.ui.screens.tune:TuneScreen",
        "Tuning campaign: many configurations under an SLO",
        footer=False,
    ),
}


def mode_bindings(registry: dict[str, ModeSpec] = MODE_REGISTRY) -> list[Binding]:
    """The key of each mode as a binding of the app, with the id ``mode-<name>`` (what
    ``[keymap]`` remaps)."""
    return [
        Binding(spec.key, f"mode({name!r})", spec.title, tooltip=spec.tooltip, id=f"mode-{name}", show=spec.footer)
        for name, spec in registry.items()
    ]


_INJECTED = ("host", "demo")


def _constructible(cls: Callable[..., Screen[Any]]) -> bool:
    """True when ``cls`` can be built with no arguments besides the injected host/demo."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return True
    for p in params:
        if p.name in _INJECTED or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is p.empty:
            return False
    return True


def screen_factory(app: Any, spec: str | Callable[..., Screen[Any]]) -> Callable[[], Screen[Any]] | None:
    """A no-argument factory for a mode's screen, or None when the screen needs arguments a mode
    can't give (a wiring mistake, logged).

    A screen whose module fails to import is not dropped: the failure is logged with its traceback
    (``tunedeck.log``) and the mode opens a :class:`ScreenFailed` that says what broke and where the
    traceback is, so the key still answers. A screen whose constructor takes ``host`` and/or
    ``demo`` gets the app's target host and demo flag."""
    if isinstance(spec, str):
        module, _, name = spec.partition(":")
        try:
            cls = getattr(importlib.import_module(module), name)
        except Exception as e:
            log.error("the %s screen (%s) failed to load", module, spec, exc_info=True)
            failure = f"{type(e).__name__}: {e}"
            return lambda: ScreenFailed(spec, failure)
    else:
        cls = spec
    if not _constructible(cls):
        log.error("mode screen %s needs constructor arguments; not offered as a mode", spec)
        return None
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]

    def factory() -> Screen[Any]:
        kwargs: dict[str, Any] = {}
        if "host" in params:
            kwargs["host"] = app.host
        if "demo" in params:
            kwargs["demo"] = app.demo
        screen: Screen[Any] = cls(**kwargs)
        return screen

    return factory


__all__ = ["MODE_REGISTRY", "ModeSpec", "mode_bindings", "screen_factory"]
