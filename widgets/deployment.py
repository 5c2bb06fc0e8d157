"""What a multi-node deployment view draws with: one startup bar per node
(:class:`NodeProgressList`, fed the same ``StartupProgress`` snapshots as the single-run
view) and the merged log with a node tag on every line (:class:`MergedLog`: a
:class:`~tunedeck.widgets.server_log.ServerLog` whose tags are coloured per node and which can show
one node's lines only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from rich.text import Text
from textual.css.query import NoMatches
from textual.reactive import reactive
from textual.widget import Widget

from tunedeck.fmt import eta
from tunedeck.model import StartupProgress
from tunedeck.widgets.server_log import ServerLog
from tunedeck.widgets.severity_log import tag_node
from tunedeck.widgets.startup_progress import describe

#: one colour per node, in the deployment's order (head first); repeats past the sixth
NODE_STYLES = ("bold cyan", "bold magenta", "bold green", "bold yellow", "bold blue", "bold bright_red")
_STATE_STYLE = {
    "ready": "green",
    "up (worker)": "green",
    "failed": "bold red",
    "exited": "bold red",
    "stalled": "bold yellow",
    "stopped": "blue",
}


def node_styles(nodes: Sequence[str]) -> dict[str, str]:
    """node → its tag style."""
    return {n: NODE_STYLES[i % len(NODE_STYLES)] for i, n in enumerate(nodes)}


@dataclass(frozen=True)
class NodeRow:
    """One bar: a member of the deployment and its startup."""

    #: the member's tag (its node, ``node:kind`` for a helper process)
    tag: str
    #: ``head`` or ``worker``
    role: str
    #: the tracker's snapshot (None: nothing read yet)
    progress: StartupProgress | None
    #: the member's state (``starting`` when there is no snapshot yet)
    state: str = "starting"
    #: why the node's log link is down, when it is
    link_error: str | None = None


class NodeProgressList(Widget):
    """One line per node: tag, role, bar, %, phase, ETA and state."""

    DEFAULT_CSS = """
    NodeProgressList {
        height: auto;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    rows: reactive[tuple[NodeRow, ...]] = reactive((), layout=True)
    #: node → tag style (the merged log's colours)
    node_styles: reactive[dict[str, str]] = reactive(dict, layout=True)

    def update_rows(self, rows: Iterable[NodeRow], styles: dict[str, str] | None = None) -> None:
        if styles is not None:
            self.node_styles = dict(styles)
        self.rows = tuple(rows)

    def render(self) -> Text:
        if not self.rows:
            return Text("waiting for the nodes…", style="dim")
        tag_w = max(len(r.tag) for r in self.rows)
        bar_w = max(10, min(30, self.size.width - tag_w - 60))
        out = Text()
        for i, r in enumerate(self.rows):
            if i:
                out.append("\n")
            p = r.progress
            out.append(f"{r.tag:<{tag_w}} ", style=self.node_styles.get(tag_node(r.tag, self.node_styles), "bold"))
            out.append(f"{r.role:<6} ", style="dim")
            frac = max(0.0, min(1.0, p.fraction)) if p is not None else 0.0
            if r.state == "up (worker)":
                frac = 1.0  # a worker serves no HTTP: its start-up ended with its head's
            filled = round(frac * bar_w)
            bar_style = {
                "ready": "green",
                "up (worker)": "green",
                "failed": "red",
                "exited": "red",
                "stalled": "yellow",
                "stopped": "blue",
            }
            out.append("█" * filled, style=bar_style.get(r.state, "cyan"))
            out.append("░" * (bar_w - filled), style="dim")
            out.append(f" {frac * 100:3.0f}%  ")
            state_text = {"stopped": "stopped (by you)"}.get(r.state, r.state)
            out.append(state_text, style=_STATE_STYLE.get(r.state, "yellow"))
            if p is None:
                out.append("  waiting for the log", style="dim")
            elif r.state == "ready":
                out.append(f"  ready in {eta(p.elapsed)}", style="dim")
            elif r.state in ("failed", "exited", "stalled"):
                if p.diagnosis:
                    out.append(f"  {p.diagnosis}", style=_STATE_STYLE.get(r.state, ""))
            elif r.state == "starting":
                out.append(f"  {describe(p)}")
                out.append(f"  ETA {eta(p.eta)}", style="dim")
                if p.diagnosis:  # a fatal line while the process lives on
                    out.append(f"  ⚠ {p.diagnosis}", style="bold yellow")
            if r.link_error:
                out.append(f"  ⚠ {r.link_error}", style="yellow")
        return out

    @property
    def text(self) -> str:
        """Plain text of what is shown (tests, screen readers)."""
        return self.render().plain


class MergedLog(ServerLog):
    """Every member's log in one view, each line ``[tag] text``; :meth:`set_node` shows one
    node's lines only (None: all)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: the node whose lines are shown (None: every node's)
        self.node: str | None = None
        self._tag_width = 0

    def set_tag_styles(self, styles: dict[str, str], tags: Sequence[str]) -> None:
        """Node colours for the tags (``tags``: every member's, for their common width)."""
        self._tag_width = max((len(t) for t in tags), default=0)
        self.view.highlighter.tag_styles = dict(styles)  # type: ignore[attr-defined]

    def append_tagged(self, lines: Iterable[tuple[str, str]]) -> None:
        """Queue (tag, line) pairs; untrusted text, never parsed as markup."""
        w = self._tag_width
        self.append_lines(f"[{tag:<{w}}] {line}" for tag, line in lines)

    def set_node(self, node: str | None) -> None:
        self.node = node
        self._rebuild()
        self._update_status()

    def _visible(self, lines: list[str]) -> list[str]:
        out = super()._visible(lines)
        node = self.node
        if node is None:
            return out
        nodes = list(self.view.highlighter.tag_styles)  # type: ignore[attr-defined]
        return [ln for ln in out if tag_node(ln[1 : ln.find("]")].strip(), nodes) == node]

    def _update_status(self) -> None:
        super()._update_status()
        if self.node is None:
            return
        try:
            status = self.query_one("#log-status")
        except NoMatches:  # not composed yet
            return
        status.update(Text(f"{self.status_text}  ·  node {self.node} only (t: next node)"))  # type: ignore[attr-defined]


__all__ = ["NODE_STYLES", "MergedLog", "NodeProgressList", "NodeRow", "node_styles", "tag_node"]
