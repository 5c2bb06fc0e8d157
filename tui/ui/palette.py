"""Command palette provider: every app action and every binding of the current screen."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Iterator, cast

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:  # pragma: no cover
    from tunedeck.ui.app import TunedeckApp


class TunedeckCommands(Provider):
    """Exposes mode switches, app actions (reconnect, quit, ...) and the current
    screen's bindings (with their descriptions and tooltips) as palette commands."""

    def _commands(self) -> Iterator[tuple[str, str, partial[Any]]]:
        app = cast("TunedeckApp", self.app)
        seen: set[str] = set()
        for mode, spec in app.mode_specs.items():
            if mode in app.available_modes:
                yield (
                    f"Go to {spec.title}",
                    f"Switch to the {spec.title} screen ({spec.key})",
                    partial(app.run_action, f"mode({mode!r})"),
                )
                seen.add(f"mode('{mode}')")
        for owner in (self.screen, app):
            for binding in Binding.make_bindings(getattr(type(owner), "BINDINGS", [])):
                if binding.action in seen or not binding.description or binding.action.startswith("mode("):
                    continue
                seen.add(binding.action)
                help_text = binding.tooltip or binding.description
                if binding.key:
                    help_text = f"{help_text} ({binding.key})"
                yield (binding.description, help_text, partial(app.run_action, binding.action, owner))

    async def discover(self) -> Hits:
        for name, help_text, run in self._commands():
            yield DiscoveryHit(name, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, run in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), run, help=help_text)
