"""The host switcher (k9s contexts): the hosts of ``~/.ssh/config``, the ones used before, this
machine and the simulator; ``enter`` switches the dashboard to the highlighted one."""

from __future__ import annotations

import json
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

RECENT_FILE = "recent-hosts.json"
MAX_RECENT = 20


def ssh_aliases(path: Path | None = None) -> list[str]:
    """``Host`` aliases of an OpenSSH client config (patterns with ``*``, ``?`` or ``!`` left out)."""
    path = path or Path.home() / ".ssh" / "config"
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    out: list[str] = []
    for line in text.splitlines():
        parts = line.strip().split()
        if len(parts) >= 2 and parts[0].lower() == "host":
            for name in parts[1:]:
                if name.startswith("#"):
                    break
                if not any(c in name for c in "*?!") and name not in out:
                    out.append(name)
    return out


def _recent_path() -> Path:
    from tunedeck.util.paths import state_dir

    return state_dir() / RECENT_FILE


def recent_hosts() -> list[str]:
    """Targets the dashboard was used on, newest first."""
    try:
        data = json.loads(_recent_path().read_text())
    except (OSError, ValueError):
        return []
    return [str(x) for x in data if isinstance(x, str)] if isinstance(data, list) else []


def remember_host(target: str) -> None:
    """Put ``target`` first in the recent list (best effort: a read-only state dir is no error)."""
    from tunedeck.util.files import atomic_write_json

    names = [target] + [t for t in recent_hosts() if t != target]
    try:
        atomic_write_json(_recent_path(), names[:MAX_RECENT])
    except OSError:
        pass


def host_choices(current: str, ssh_config: Path | None = None) -> list[tuple[str, str]]:
    """(target, where it comes from) for the switcher: current first, then recent, ssh config,
    this machine and the simulator (each once)."""
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()

    def add(target: str, why: str) -> None:
        if target and target not in seen:
            seen.add(target)
            rows.append((target, why))

    add(current, "current")
    for t in recent_hosts():
        add(t, "used before")
    for t in ssh_aliases(ssh_config):
        add(t, "~/.ssh/config")
    add("local", "this machine")
    add("demo", "the simulator")
    return rows


class HostsModal(ModalScreen[str | None]):
    """Pick a host; dismisses with its target (None: stay)."""

    DEFAULT_CSS = """
    HostsModal { align: center middle; }
    HostsModal > Vertical { width: 70; max-width: 100%; height: auto; max-height: 80%;
                            border: thick $primary; background: $surface; padding: 0 1; }
    HostsModal #hosts-title { text-style: bold; }
    HostsModal OptionList { height: auto; max-height: 20; }
    HostsModal #hosts-hint { color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "cancel", "Stay", id="hosts-cancel")]

    def __init__(self, current: str, choices: list[tuple[str, str]]) -> None:
        super().__init__()
        #: the target shown now
        self.current = current
        #: (target, source)
        self.choices = choices

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Switch host", id="hosts-title")
            opts = []
            for target, why in self.choices:
                t = Text()
                t.append(target, style="bold" if target == self.current else "")
                t.append(f"  {why}", style="dim")
                opts.append(Option(t, id=target))
            yield OptionList(*opts, id="hosts-list")
            yield Label("enter switches · escape stays", id="hosts-hint")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


__all__ = ["HostsModal", "host_choices", "recent_hosts", "remember_host", "ssh_aliases"]
