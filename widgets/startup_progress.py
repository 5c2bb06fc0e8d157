"""Startup progress: a bar with the phase, elapsed time, ETA, GPU memory, a stalled
marker and the failure diagnosis. Renders a ``StartupProgress`` snapshot passed in."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.visual import visualize
from textual.widget import Widget

from tunedeck.fmt import eta
from tunedeck.model import StartupProgress

PHASE_NAMES = {
    "process-start": "starting process",
    "distributed-init": "distributed init",
    "weight-loading": "loading weights",
    "compile": "compiling",
    "kv-cache": "allocating KV cache",
    "graph-capture": "capturing CUDA graphs",
    "warmup": "warming up",
    "ready": "ready",
}


def describe(p: StartupProgress) -> str:
    """The first line's text: '42%  loading weights 14/37'."""
    name = PHASE_NAMES.get(p.phase or "", p.phase or "waiting for the log")
    if p.phase_label:
        name += f" ({p.phase_label})"
    if p.phase_total:
        name += f" {p.phase_n}/{p.phase_total}"
    elif p.phase_progress is not None and p.state == "starting":
        name += f" {p.phase_progress * 100:.0f}%"
    return name


class StartupProgressView(Widget):
    """Shows one :class:`StartupProgress`; call :meth:`update` with a new snapshot."""

    DEFAULT_CSS = """
    StartupProgressView {
        height: auto;
        min-height: 3;
        padding: 0 1;
    }
    """

    progress: reactive[StartupProgress | None] = reactive(None)
    #: set once the user stopped the run: what the stop did ("stopped (TERM) · 70 GiB freed")
    ended: reactive[str | None] = reactive(None)
    #: True while an existing run's log is being read from the start (no 0% flash on reopen)
    catching_up: reactive[bool] = reactive(False)
    #: set while the link to the host is lost ("link lost 12s ago — reconnecting…"): the values
    #: shown are the last ones heard, and the health is not known
    link_lost: reactive[str | None] = reactive(None)

    #: the rows its text took at the last change (a layout pass only when they change)
    _rows = -1
    #: the text shown (a snapshot that reads the same costs no repaint)
    _shown: Text | None = None

    def update(self, snapshot: StartupProgress | None) -> None:
        """Show ``snapshot``. A new one comes twice a second, and the elapsed time and the ETA
        are shown in whole seconds: every other one reads as the one before, and is not painted."""
        if snapshot != self.progress:
            self.set_reactive(StartupProgressView.progress, snapshot)
            self._fit()

    def _fit(self) -> None:
        """Repaint when the text changed; the screen's layout is redone only when the text needs
        another number of rows (the elapsed time changes every second, its height seldom)."""
        text = self.render()
        if text == self._shown:
            return
        self._shown = text
        width = self.size.width
        rows = visualize(self, text).get_height(self.styles, width) if width else -1  # type: ignore[arg-type]  # as Textual calls it
        if rows != self._rows or rows < 0:
            self._rows = rows
            self.refresh(layout=True)
        else:
            self.refresh()

    def watch_progress(self) -> None:
        self._fit()

    def watch_ended(self) -> None:
        self._fit()

    def watch_catching_up(self) -> None:
        self._fit()

    def watch_link_lost(self) -> None:
        self._fit()

    def set_ended(self, text: str | None) -> None:
        self.ended = text

    def render(self) -> Text:
        p = self.progress
        if self.ended:
            t = Text()
            t.append("■ ", style="bold")
            t.append(self.ended, style="bold")
            return t
        if p is None:
            return Text("no startup to show", style="dim")
        if self.catching_up and p.state == "starting" and p.fraction <= 0.0:
            return Text("reading the run's log from the start…", style="dim")
        width = max(10, self.size.width - 8)
        frac = max(0.0, min(1.0, p.fraction))
        filled = round(frac * width)
        style = {"ready": "green", "failed": "red", "stalled": "yellow", "stopped": "blue"}.get(
            p.state, "yellow" if p.stalled else "cyan"
        )
        t = Text()
        t.append("█" * filled, style=style)
        t.append("░" * (width - filled), style="dim")
        t.append(f" {frac * 100:3.0f}%\n")
        if p.state == "ready":
            t.append("✓ ready", style="bold green")
        elif p.state == "stopped":
            t.append("■ stopped (by you)", style="bold blue")
        elif p.state == "stalled":
            t.append(describe(p), style="bold")
            t.append("  ⚠ stalled (still running)", style="bold yellow")
        else:
            t.append(describe(p), style="bold")
        t.append("\n")
        # once ready the clock stops: the time it took, not a counter that keeps running
        bits = [f"ready in {eta(p.elapsed)}" if p.state == "ready" else f"elapsed {eta(p.elapsed)}"]
        if p.state == "starting":
            bits.append(f"ETA {eta(p.eta)}" + (f" ({p.eta_source})" if p.eta_source else ""))
        if p.gpu_memory and p.state != "stopped":
            bits.append("GPU " + " ".join(f"{m / 1024:.1f}" for m in p.gpu_memory) + " GiB")
        if self.link_lost:
            bits.append("health unknown (no link)")  # the last answer is stale, "ok" least of all
        elif p.state == "starting" or p.health == "ok":
            # /health is polled only during startup: after it, a last "down" is stale
            bits.append(f"health {p.health}")
        t.append("  ·  ".join(bits), style="dim")
        if self.link_lost:
            t.append(f"\n⚠ {self.link_lost}", style="bold yellow")
        if p.state == "stopped":
            if p.diagnosis and p.diagnosis != "stopped (by you)":
                t.append(f"\n{p.diagnosis}", style="blue")
            return t
        if p.state == "stalled":
            t.append(f"\n⚠ {p.diagnosis or 'stalled'}", style="bold yellow")
            if p.proof:
                t.append(f"\n  {p.proof}", style="yellow")
            t.append("\n  still running and holding its GPUs: s stops it (or tunedeck stop)", style="dim")
            return t
        if p.stalled:
            t.append(f"\n⚠ STALLED: no progress for {eta(p.stalled_for)}", style="bold yellow")
        if p.diagnosis:
            warn = p.state == "starting"  # a fatal line while the process lives on
            t.append(f"\n{'⚠' if warn else '✗'} {p.diagnosis}", style="bold yellow" if warn else "bold red")
            if p.proof:
                t.append(f"\n  {p.proof}", style="yellow" if warn else "red")
        return t

    @property
    def text(self) -> str:
        """Plain text of what is shown (tests, screen readers)."""
        return self.render().plain


__all__ = ["StartupProgressView", "describe"]
