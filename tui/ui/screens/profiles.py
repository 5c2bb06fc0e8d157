"""The profile list: Launch mode opens here.

Every server profile (built-in and user) with its engine, model, TP, attention backend and NCCL
preset; below it the exact command of the highlighted one. ``enter``/``e`` edits it in the launch
form (pushed on top; ``escape`` there comes back), ``n`` starts a new one, ``L``/``ctrl+l``
launches it with one key (pre-flight first: errors stop it, warnings ask), ``p`` runs only the
pre-flight, ``1``/``2`` mark A and B and ``g`` starts the A/B in the Compare mode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Footer, Header, Input, Static

from tunedeck.profiles.builder import build_command
from tunedeck.profiles.model import ProfileError, ServerProfile
from tunedeck.profiles.store import ProfileStore
from tunedeck.ui.bindings import filter_rows, mark_ab
from tunedeck.ui.screens.hosted import HostScreen
from tunedeck.ui.screens.modals import ConfirmModal
from tunedeck.widgets.filter_table import FilterTable, TableFilter


class ProfileTable(FilterTable):
    """The profiles, one row each, keyed by name (``/`` filters, a header click sorts)."""

    COLUMNS = (
        ("mark", "", 3),
        ("name", "Profile", 18),
        ("engine", "Engine", 7),
        ("model", "Model", 34),
        ("tp", "TP", 3),
        ("attention", "Attention", 12),
        ("nccl", "NCCL", 12),
        ("source", "Source", 7),
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)

    #: at 80 columns, key → width of the columns shown: narrower Model and Attention, no NCCL column
    NARROW = {"mark": 2, "name": 15, "engine": 6, "model": 20, "tp": 2, "attention": 10, "source": 7}

    def on_mount(self) -> None:
        self.narrow = self.app.size.width < 100
        for key, label, width in self.COLUMNS:
            if not self.narrow:
                self.add_column(label, key=key, width=width)
            elif key in self.NARROW:
                self.add_column(label, key=key, width=self.NARROW[key])

    def cells(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        """A full row (COLUMNS order) cut to the columns shown."""
        if not getattr(self, "narrow", False):
            return row
        return tuple(v for (k, _, _), v in zip(self.COLUMNS, row) if k in self.NARROW)


def e_key(e: ProfileError) -> str:
    """The row key of a broken profile file."""
    return f"broken:{e.path or '?'}"


def warnings_modal(name: str, warnings: list[Any]) -> ConfirmModal:
    """The question asked when pre-flight warns: Cancel is the default."""
    text = "\n".join(f"• {f.line}" for f in warnings)
    return ConfirmModal(text + "\n\nLaunch anyway?", title=f"Pre-flight of {name} warns", action="Launch anyway")


async def checked_command(
    screen: HostScreen,
    profile: ServerProfile,
    *,
    store: Any,
    on_report: Any,
    on_failure: Any,
    launch: bool = True,
) -> Any:
    """Pre-flight ``profile`` on the screen's host; the command to launch, or None (errors, the user
    said no, or ``launch`` is False). Every launch goes through here: the list's ``L`` and the form's
    ``ctrl+l``."""
    from tunedeck.services.checks import preflight_for

    sim = bool(getattr(screen.app, "sim", False))
    try:
        report = await preflight_for(screen.host, profile, demo=screen.demo, sim=sim, store=store)
    except Exception as e:  # noqa: BLE001 - HostError, UnsafeInput: shown, nothing launched
        on_failure(f"pre-flight failed: {e}")
        screen.notify(f"pre-flight failed: {e}", severity="error", markup=False)
        return None
    on_report(report)
    if not launch:
        return None
    if report.errors or report.command is None:
        screen.notify(
            f"{profile.name}: not launched ({len(report.errors)} pre-flight error(s))",
            severity="error",
            timeout=8,
            markup=False,
        )
        return None
    warnings = [f for f in report.findings if f.severity == "warning"]
    if warnings and not await screen.app.push_screen_wait(warnings_modal(profile.name, warnings)):
        return None
    return report.command


def _attention(p: ServerProfile) -> str:
    if p.attention_backend:
        return p.attention_backend
    if p.prefill_backend or p.decode_backend:
        return f"{p.prefill_backend or '-'}/{p.decode_backend or '-'}"
    return "default"


class ProfilesScreen(HostScreen):
    """Built-in and user profiles, the command preview, and one-key launch / edit / A/B."""

    DEFAULT_CSS = """
    ProfilesScreen #profiles-panel { height: auto; max-height: 50%; border: round $primary 50%; }
    ProfilesScreen ProfileTable { height: auto; max-height: 100%; }
    ProfilesScreen #profile-preview { height: auto; max-height: 10; border: round $primary 50%; padding: 0 1; }
    ProfilesScreen #profile-messages { height: 1fr; padding: 0 1; }
    ProfilesScreen #profile-marks { height: 1; padding: 0 1; background: $boost; }
    """

    BINDINGS = [
        Binding(
            "enter,e", "edit", "Edit", tooltip="Open the highlighted profile in the launch form", id="profiles-edit"
        ),
        Binding("n", "new", "New", tooltip="A new profile in the launch form", id="profiles-new"),
        Binding(
            "L,ctrl+l",
            "launch",
            "Launch it",
            tooltip="Pre-flight, then launch the highlighted profile",
            id="profiles-launch",
        ),
        Binding(
            "p", "preflight", "Pre-flight", tooltip="Check the highlighted profile on the host", id="profiles-preflight"
        ),
        *mark_ab("profiles", show=False),
        Binding("g", "start_ab", "Run A/B", tooltip="Compare A and B (opens the Compare mode)", id="profiles-ab"),
        Binding(
            "u",
            "tune",
            "Tune",
            tooltip="A tuning campaign over the highlighted profile, the marked A/B profiles its candidates "
            "(opens the Tune mode)",
            id="profiles-tune",
            show=False,
        ),
        filter_rows("profiles", "profiles"),
    ]

    def __init__(
        self, *, host: Any = None, demo: bool = False, store: ProfileStore | None = None, **kwargs: Any
    ) -> None:
        super().__init__(host=host, demo=demo, **kwargs)
        self.store = store or ProfileStore()
        #: name → profile, in table order
        self.profiles: dict[str, ServerProfile] = {}
        #: profile names marked A and B
        self.marked: dict[str, str | None] = {"A": None, "B": None}
        #: the last pre-flight report per profile name
        self.reports: dict[str, Any] = {}
        #: True while a pre-flight / launch is under way
        self.busy = False
        #: row key → the error of a profile file that cannot be read (shown, never dropped)
        self.broken: dict[str, ProfileError] = {}

    def compose(self) -> ComposeResult:
        yield Header(icon="◆")
        with Vertical(id="profiles-panel"):
            yield TableFilter("#profiles", id="profiles-filter")
            yield ProfileTable(id="profiles")
        yield Static(id="profile-marks")
        yield Static(id="profile-preview")
        yield Static(id="profile-messages")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#profiles-panel").border_title = "Profiles"
        self.query_one("#profile-preview").border_title = "Command"
        self.reload()
        self.query_one(ProfileTable).focus()

    def on_screen_resume(self) -> None:
        self.reload()  # the form may have saved a new profile

    # ------------------------------------------------------------------ data
    @property
    def table(self) -> ProfileTable:
        return self.query_one(ProfileTable)

    def reload(self) -> None:
        """Re-read the profiles (cursor kept on the same name)."""
        listing = self.store.listing()
        current = self.highlighted
        profiles = sorted(listing.profiles, key=lambda p: (p.source != "builtin", p.name))
        self.profiles = {p.name: p for p in profiles}
        self.broken = {e_key(e): e for e in listing.errors}
        self._fill()
        table = self.table
        if current in table.shown_keys:
            table.move_cursor(row=table.shown_keys.index(current))
        self._show_marks()
        self._show_preview()
        if listing.errors:
            n = len(listing.errors)
            self._messages(
                Text(
                    f"{n} profile file(s) cannot be read (rows marked broken): "
                    + "; ".join(str(e) for e in listing.errors),
                    style="bold red",
                )
            )

    def _fill(self) -> None:
        """Hand every row (profiles, then broken files) to the table; it filters and sorts."""
        table = self.table
        rows: list[tuple[str, tuple[Any, ...]]] = [
            (p.name, table.cells(self._cells(p))) for p in self.profiles.values()
        ]
        bad = "bold red"
        for key, e in self.broken.items():
            stem = Path(e.path).stem if e.path else "?"
            rows.append(
                (
                    key,
                    table.cells(
                        (
                            Text("!", style=bad),
                            Text(stem, style=bad),
                            "?",
                            Text("cannot be read", style=bad),
                            "",
                            "",
                            "",
                            Text("broken", style=bad),
                        )
                    ),
                )
            )
        table.set_rows(rows)

    def _row_key(self) -> str | None:
        table = self.query_one(ProfileTable)
        if table.row_count == 0 or not 0 <= table.cursor_row < table.row_count:
            return None
        return str(table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value)

    def _cells(self, p: ServerProfile) -> tuple[str, ...]:
        mark = "".join(s for s in ("A", "B") if self.marked[s] == p.name)
        return (
            mark,
            p.name,
            p.engine,
            p.model or "(none)",
            str(p.tp),
            _attention(p),
            p.nccl_preset or "-",
            p.source or "user",
        )

    @property
    def highlighted(self) -> str | None:
        """The name of the highlighted profile (None when the list is empty)."""
        key = self._row_key()
        return key if key in self.profiles else None

    @property
    def highlighted_broken(self) -> ProfileError | None:
        """The error of the highlighted row when it is a broken file."""
        key = self._row_key()
        return self.broken.get(key) if key else None

    def _profile(self) -> ServerProfile | None:
        name = self.highlighted
        if name is None:
            err = self.highlighted_broken
            if err is not None:
                self.notify(f"this profile file cannot be read: {err}", severity="error", markup=False)
            else:
                self.notify("no profile highlighted", severity="warning")
            return None
        return self.profiles[name]

    # ------------------------------------------------------------------ view
    def _messages(self, text: Text | str) -> None:
        self.query_one("#profile-messages", Static).update(text)

    def _show_marks(self) -> None:
        t = Text()
        t.append("A: ", style="bold")
        t.append(self.marked["A"] or "(press 1)")
        t.append(" · ")
        t.append("B: ", style="bold")
        t.append(self.marked["B"] or "(press 2)")
        t.append(" · 1/2 mark A/B, g runs the A/B", style="dim")
        self.query_one("#profile-marks", Static).update(t)

    def _show_preview(self) -> None:
        name = self.highlighted
        preview = self.query_one("#profile-preview", Static)
        if name is None:
            err = self.highlighted_broken if self.is_mounted else None
            if err is not None:
                preview.update(
                    Text(
                        f"cannot be read: {err}\nFix the file (or delete it); "
                        "`tunedeck profiles check FILE` shows every problem.",
                        style="bold red",
                    )
                )
            else:
                preview.update("no profiles: press n for a new one")
            return
        try:
            cmd = build_command(self.profiles[name], demo=self.demo, store=self.store)
        except ProfileError as e:
            preview.update(Text(f"cannot build the command: {e}", style="bold red"))
            return
        preview.update(Text(cmd.display))

    @on(DataTable.RowHighlighted, "#profiles")
    def _highlighted(self, _ev: DataTable.RowHighlighted) -> None:
        self._show_preview()
        name = self.highlighted
        report = self.reports.get(name) if name else None
        if report is not None:
            self._show_report(report)
        else:
            self._messages("")

    # ------------------------------------------------------------------ filter
    def action_filter(self) -> None:
        self.query_one(TableFilter).open()

    def on_key(self, event: events.Key) -> None:
        self.query_one(TableFilter).screen_key(event)

    @on(Input.Changed, "#profiles-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        event.stop()  # the box has filtered the table
        self._show_preview()

    @on(DataTable.RowSelected, "#profiles")
    def _selected(self, ev: DataTable.RowSelected) -> None:
        ev.stop()
        self.action_edit()

    def _show_report(self, report: Any) -> None:
        t = Text()
        style = {"error": "bold red", "warning": "bold yellow"}
        if not report.findings:
            t.append(f"pre-flight {report.profile}: no findings", style="green")
        for i, f in enumerate(report.findings):
            if i:
                t.append("\n")
            t.append(f"{f.severity}: ", style=style.get(f.severity, "dim"))
            t.append(f.line)
        self._messages(t)

    # ------------------------------------------------------------------ actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("launch", "preflight"):
            if self.host is None:
                return False
            return None if self.busy else True
        if action == "start_ab":
            return True if self.marked["A"] and self.marked["B"] else None
        return True

    def _push_form(self, profile: ServerProfile | None) -> None:
        from tunedeck.ui.screens.launch import LaunchScreen

        self.app.push_screen(LaunchScreen(profile, store=self.store, host=self.host, demo=self.demo))

    def action_edit(self) -> None:
        p = self._profile()
        if p is not None:
            self._push_form(p)

    def action_new(self) -> None:
        self._push_form(None)

    def action_mark(self, side: str) -> None:
        name = self.highlighted
        if name is None:
            return
        self.marked[side] = name
        self._fill()
        self._show_marks()
        self.refresh_bindings()

    def action_preflight(self) -> None:
        p = self._profile()
        if p is not None and not self.busy:
            self.run_preflight(p, launch=False)

    def action_launch(self) -> None:
        p = self._profile()
        if p is not None and not self.busy:
            self.run_preflight(p, launch=True)

    @work(group="profiles-preflight", exclusive=True, exit_on_error=False)
    async def run_preflight(self, profile: ServerProfile, launch: bool) -> None:
        self.busy = True
        self.refresh_bindings()
        self._messages(Text(f"pre-flight {profile.name} on {getattr(self.host, 'target', 'host')} …", style="dim"))
        try:

            def shown(report: Any) -> None:
                self.reports[profile.name] = report
                if self.highlighted == profile.name:
                    self._show_report(report)

            command = await checked_command(
                self,
                profile,
                store=self.store,
                on_report=shown,
                on_failure=lambda msg: self._messages(Text(msg, style="bold red")),
                launch=launch,
            )
            if command is None:
                return
            from tunedeck.ui.screens.launch import LaunchScreen

            self.post_message(LaunchScreen.LaunchRequested(profile, command))
        finally:
            self.busy = False
            self.refresh_bindings()

    async def _switch_mode(self, mode: str) -> Any:
        """The dashboard's ``mode`` switched to: its screen; None (and said) when the app has none."""
        from tunedeck.ui.modes import MODE_REGISTRY

        app: Any = self.app
        if mode not in getattr(app, "available_modes", ()):
            self.notify(f"the {MODE_REGISTRY[mode].title} mode is not available", severity="error")
            return None
        await app.switch_mode(mode)
        return app.screen

    async def action_start_ab(self) -> None:
        a, b = self.marked["A"], self.marked["B"]
        if not a or not b:
            self.notify("Mark two profiles first: 1 marks A, 2 marks B.", severity="warning")
            return
        screen = await self._switch_mode("compare")
        marked = getattr(screen, "marked", None)
        if marked is None or not hasattr(screen, "action_start_ab"):
            return
        if getattr(screen, "runner", None) is not None:
            self.notify("an A/B is already running", severity="warning")
            return
        marked["A"], marked["B"] = a, b
        screen._show_marks()
        screen.action_start_ab()

    async def action_tune(self) -> None:
        """Open the Tune mode with the highlighted profile as the base and the profiles marked
        A and B (other than the base) as candidates."""
        base = self.highlighted
        if base is None:
            return
        screen = await self._switch_mode("tune")
        if screen is None:
            return
        if getattr(screen, "campaign", True) is not None or not hasattr(screen, "set_candidates"):
            return  # a campaign runs there: the screen shows it
        screen.set_candidates(base, [m for m in self.marked.values() if m and m != base])


__all__ = ["ProfileTable", "ProfilesScreen", "warnings_modal"]
