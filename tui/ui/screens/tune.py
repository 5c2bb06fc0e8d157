"""The Tune screen: start a tuning campaign, watch its candidates, read the frontier.

Left: the server profiles (``B`` makes the highlighted one the base, ``m`` marks or unmarks it as
a candidate) and the form: the vary spec (``KEY=V1,V2``, several separated by ``;``), the SLO
(TTFT p90 and TPOT p90 in ms, per-user tok/s), the workload source (and its file) and the
budget. Above the results, the exact ``tunedeck tune …`` command the campaign runs, updated as
the form changes. ``ctrl+r`` pre-flights every candidate on the host and lists the findings;
``ctrl+l`` shows the command and asks (Cancel is the default), then starts the campaign ON the
host (:func:`tui.commands.tune.start_campaign`, :class:`tui.services.tunerun.TuneRun`: detached,
a lost link or a closed dashboard never cuts it); ``ctrl+x`` cancels it after asking.

While it runs: each candidate's state (queued, starting, measuring with the step, done, failed,
dropped, skipped), the best so far, the ETA of the round, the Pareto frontier of tok/s per user
against tok/s per GPU as a chart, and the event log (:mod:`tui.ab.tuneview` folds the events).
On opening, the screen follows a campaign still running on the host. A lost link is said on
the status line until the host answers again (:class:`tui.hostops.liveness.LinkWatch`).

``start_campaign(args, plan, confirm, on_skip)`` (tests) returns an object with ``id``,
``report``, ``events()`` (an async iterator of :class:`ABEvent`) and ``cancel()``.
"""

from __future__ import annotations

import logging
import shlex
import time
from typing import Any, Awaitable, Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Label, Log, OptionList, Select, Static
from textual.widgets.option_list import Option

from tui.ab.runner import ABEvent
from tui.ab.tuneview import TuneProgress, TuneSnapshot
from tui.hostops.liveness import LinkWatch
from tui.ui.screens.modals import ConfirmModal
from widgets.frontier_chart import FrontierChart

log = logging.getLogger(__name__)

#: the form's fields: (id, label, placeholder)
FIELDS = (
    ("tune-vary", "Vary (KEY=V1,V2; …)", "flags.attention-backend=fa3,triton"),
    ("tune-ttft", "TTFT p90 at most (ms)", "500"),
    ("tune-tpot", "TPOT p90 at most (ms)", "50"),
    ("tune-per-user", "per-user tok/s at least", ""),
    ("tune-dataset-path", "Workload file", "(sharegpt, custom, …)"),
    ("tune-budget", "Budget", "2h, 90m"),
)
#: the table's columns: (key, label)
COLUMNS = (
    ("n", "#"),
    ("name", "candidate"),
    ("state", "state"),
    ("capacity", "capacity"),
    ("per_user", "tok/s/user"),
    ("per_gpu", "tok/s/GPU"),
    ("step", "step"),
)
STATE_STYLE = {
    "queued": "dim",
    "starting": "yellow",
    "measuring": "bold yellow",
    "done": "green",
    "failed": "bold red",
    "dropped": "dim",
    "skipped": "dim red",
    "not measured": "yellow",
}


class TuneEvent(Message):
    """One campaign event, for the table, the chart and the log."""

    def __init__(self, event: ABEvent) -> None:
        super().__init__()
        self.event = event
        """The campaign's event."""


class TuneEnded(Message):
    """The follow ended: ``report`` (the campaign's result) or ``error`` (why there is none)."""

    def __init__(self, report: dict[str, Any] | None, error: str | None = None) -> None:
        super().__init__()
        self.report = report
        """The campaign's result, or None."""
        self.error = error
        """Why there is no result."""


class TuneLink(Message):
    """The link to the campaign's host was lost (``error``) or answers again (``error`` None)."""

    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error
        """The failure, or None: the host answers again."""


class TuneFindings(Message):
    """Pre-flight findings (or a refusal) to list under the command."""

    def __init__(self, lines: list[str], *, title: str) -> None:
        super().__init__()
        self.lines = lines
        """One per candidate or refusal."""
        self.title = title
        """What they are."""


class TuneScreen(Screen[None]):
    """A tuning campaign: the form and command, live candidate states, the frontier."""

    DEFAULT_CSS = """
    TuneScreen #tune-side { width: 30; border-right: solid $panel; padding: 0 1; }
    TuneScreen #tune-profiles { height: 1fr; min-height: 4; }
    TuneScreen #tune-form { height: auto; }
    TuneScreen #tune-form Label { margin-top: 0; color: $text-muted; }
    TuneScreen #tune-form Input { height: 1; border: none; padding: 0 1; background: $boost; }
    TuneScreen #tune-form Select { height: 3; }
    TuneScreen #tune-main { padding: 0 1; }
    TuneScreen #tune-command { height: auto; color: $text-muted; }
    TuneScreen #tune-status { height: auto; margin-top: 1; }
    TuneScreen #tune-findings { height: auto; }
    TuneScreen #tune-table { height: auto; max-height: 14; margin-top: 1; }
    TuneScreen #tune-log { height: 6; border-top: solid $panel; }
    """
    BINDINGS = [
        Binding("B", "base", "Base", tooltip="Make the highlighted profile the campaign's base", id="tune-base"),
        Binding(
            "m",
            "mark",
            "Mark",
            tooltip="Mark or unmark the highlighted profile as a candidate (its changes over the base)",
            id="tune-mark",
        ),
        Binding(
            "ctrl+r",
            "preflight",
            "Pre-flight",
            tooltip="Check every candidate on the host and list the findings; nothing starts",
            id="tune-preflight",
        ),
        Binding(
            "ctrl+l",
            "start",
            "Start",
            tooltip="Show the tunedeck tune command and ask, then start the campaign on the host",
            id="tune-start",
        ),
        Binding(
            "ctrl+x",
            "cancel_campaign",
            "Cancel",
            tooltip="Cancel the running campaign (asks first); finished candidates are kept",
            id="tune-cancel",
        ),
    ]

    def __init__(
        self,
        *,
        start_campaign: Callable[..., Awaitable[Any]] | None = None,
        profiles: list[str] | None = None,
        base: str | None = None,
        marked: list[str] | None = None,
        snapshot: TuneSnapshot | None = None,
        name: str | None = None,
        id: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id)
        self.start_campaign = start_campaign
        """Starts a campaign (default: :func:`tui.commands.tune.start_campaign` on the app's host)."""
        self._profiles = profiles
        self.base = base
        """The base profile's name."""
        self.marked: list[str] = list(marked or [])
        """Profiles marked as candidates (besides the base)."""
        self.campaign: Any = None
        """The campaign being followed (True while it starts; None when idle)."""
        self.progress: TuneProgress | None = None
        self.link = LinkWatch()
        """The link to the followed campaign's host: while lost, the status line says so."""
        self._initial = snapshot
        self._status_text = Text("Pick a base (B) and a vary spec or marked profiles (m), then ctrl+l.")

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        from tui.bench.workloads import SOURCES

        with Horizontal():
            with Vertical(id="tune-side"):
                yield Label("Profiles  [dim]B[/]=base  [dim]m[/]=mark")
                yield OptionList(id="tune-profiles")
                with Vertical(id="tune-form"):
                    for fid, label, placeholder in FIELDS:
                        if fid == "tune-dataset-path":
                            yield Label("Workload")
                            yield Select(
                                [(s, s) for s in SOURCES], value="random", allow_blank=False, id="tune-workload"
                            )
                        yield Label(label)
                        yield Input(placeholder=placeholder, id=fid)
            with VerticalScroll(id="tune-main"):
                yield Static(id="tune-command")
                yield Static(id="tune-status")
                yield Static(id="tune-findings")
                yield DataTable(id="tune-table", cursor_type="row", zebra_stripes=True)
                yield FrontierChart(id="tune-chart")
                yield Log(id="tune-log", max_lines=2000)
        yield Footer()

    def on_mount(self) -> None:
        names = self._profiles if self._profiles is not None else self._load_profiles()
        if self.base is None and names:
            self.base = names[0]
        ol = self.query_one("#tune-profiles", OptionList)
        for n in names:
            ol.add_option(Option(self._option_text(n), id=n))
        if names:
            ol.highlighted = 0
        table = self.query_one("#tune-table", DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        self._show_command()
        self._show_status()
        if self._initial is not None:
            self.show(self._initial)
        if self.start_campaign is None:
            self._reattach()

    def _load_profiles(self) -> list[str]:
        from tui.profiles.model import ProfileError
        from tui.profiles.store import ProfileStore

        try:
            return list(ProfileStore().names())
        except (ProfileError, OSError) as e:
            log.warning("profiles unavailable: %s", e)
            self.call_after_refresh(self._status, f"profiles unavailable: {e}")
            return []

    def _option_text(self, name: str) -> Text:
        t = Text()
        if name == self.base:
            t.append("base ", style="bold")
        elif name in self.marked:
            t.append("  ✓  ", style="bold green")
        else:
            t.append("     ")
        t.append(name)
        return t

    def _refresh_options(self) -> None:
        ol = self.query_one("#tune-profiles", OptionList)
        for i in range(ol.option_count):
            opt = ol.get_option_at_index(i)
            if opt.id is not None:
                ol.replace_option_prompt_at_index(i, self._option_text(opt.id))

    # ------------------------------------------------------------------ the form and its command
    def _value(self, fid: str) -> str:
        return self.query_one(f"#{fid}", Input).value.strip()

    def command(self) -> list[str]:
        """The ``tunedeck tune …`` command of the form as it stands (marked profiles: a
        ``--candidates`` file, written when the campaign starts)."""
        from tui.commands.tune import command_argv

        vary = [v.strip() for v in self._value("tune-vary").split(";") if v.strip()]
        slo = []
        for fid, term in (("tune-ttft", "ttft_p90"), ("tune-tpot", "tpot_p90"), ("tune-per-user", "per_user_tok_s")):
            if self._value(fid):
                slo.append(f"{term}:{self._value(fid)}")
        wl = self.query_one("#tune-workload", Select).value
        app: Any = self.app
        target = str(getattr(app, "target", "") or "")
        argv = command_argv(
            self.base or "BASE",
            vary=vary,
            slo=slo,
            budget=self._value("tune-budget") or None,
            dataset=wl if isinstance(wl, str) else None,
            dataset_path=self._value("tune-dataset-path") or None,
            host=target if target not in ("", "demo", "local") else None,
            demo=target == "demo",
            sim=bool(getattr(app, "sim", False)),
        )
        if self.marked:
            argv[3:3] = ["--candidates", str(self._candidates_path())]
        return argv

    def _candidates_path(self) -> Any:
        from tui.commands.tune import candidates_file

        return candidates_file(self.base or "BASE")

    def _show_command(self) -> None:
        t = Text("$ ", style="dim")
        t.append(shlex.join(self.command()))
        self.query_one("#tune-command", Static).update(t)

    @on(Input.Changed)
    def _field_changed(self, ev: Input.Changed) -> None:
        self._show_command()

    @on(Select.Changed, "#tune-workload")
    def _workload_changed(self, ev: Select.Changed) -> None:
        self._show_command()

    def _highlighted(self) -> str | None:
        ol = self.query_one("#tune-profiles", OptionList)
        if ol.highlighted is None:
            return None
        return ol.get_option_at_index(ol.highlighted).id

    def set_candidates(self, base: str, marked: list[str]) -> None:
        """A base and marked candidates chosen elsewhere (the Launch list's ``u``)."""
        self.base = base
        self.marked = [m for m in marked if m != base]
        self._refresh_options()
        self._show_command()

    def action_base(self) -> None:
        name = self._highlighted()
        if name is None:
            return
        self.base = name
        if name in self.marked:
            self.marked.remove(name)
        self._refresh_options()
        self._show_command()

    def action_mark(self) -> None:
        name = self._highlighted()
        if name is None or name == self.base:
            return
        if name in self.marked:
            self.marked.remove(name)
        else:
            self.marked.append(name)
        self._refresh_options()
        self._show_command()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        running = self.campaign is not None
        if action == "cancel_campaign":
            return True if running and self.campaign is not True else None
        if action in ("start", "preflight", "base", "mark"):
            return None if running else True
        return True

    # ------------------------------------------------------------------ status
    def _status(self, text: str | Text) -> None:
        self._status_text = Text(text) if isinstance(text, str) else text
        self._show_status()

    def _show_status(self) -> None:
        shown = self._status_text.copy()
        if self.link.is_lost:
            shown.append("\nlink lost — reconnecting (the campaign goes on on the host)", style="bold yellow")
        self.query_one("#tune-status", Static).update(shown)

    @on(TuneFindings)
    def _findings(self, msg: TuneFindings) -> None:
        t = Text(msg.title, style="bold")
        for line in msg.lines:
            t.append("\n  " + line)
        self.query_one("#tune-findings", Static).update(t)

    # ------------------------------------------------------------------ plan, pre-flight, start
    async def _plan(self, argv: list[str]) -> tuple[Any, tuple[Any, ...]] | str:
        """(args, plan) of the command, or the one line that refuses it."""
        from tui.commands.tune import parse_command, plan_of

        try:
            args = parse_command(argv)
        except ValueError as e:
            return f"tunedeck tune: {e}"
        if self.marked:
            from tui.commands.tune import write_candidates_file

            try:
                write_candidates_file(args.base, self.marked, args.candidates)
            except (ValueError, OSError) as e:
                return str(e)
        got = plan_of(args)
        return got if isinstance(got, str) else (args, got)

    def action_preflight(self) -> None:
        if self.campaign is None:
            self._preflight_worker(self.command())

    @work(group="tune-preflight", exclusive=True, exit_on_error=False)
    async def _preflight_worker(self, argv: list[str]) -> None:
        from tui.commands.tune import check_campaign
        from tui.hostops.hosts import HostError

        self.post_message(TuneFindings([], title="pre-flight: checking every candidate on the host …"))
        got = await self._plan(argv)
        if isinstance(got, str):
            self.post_message(TuneFindings([got], title="not startable:"))
            return
        args, plan = got
        host = getattr(self.app, "host", None)
        if host is None:
            self.post_message(TuneFindings(["the dashboard has no host"], title="pre-flight:"))
            return
        try:
            checked = await check_campaign(host, args, plan)
        except HostError as e:
            self.post_message(TuneFindings([str(e)], title="pre-flight failed:"))
            return
        lines = [f"{c.name}: {why or 'ok'}" for c, _, why in checked]
        lines.append(f"estimate: {plan[5].text}")
        skipped = sum(1 for _, _, why in checked if why)
        self.post_message(TuneFindings(lines, title=f"pre-flight: {len(checked) - skipped} ready, {skipped} skipped"))

    def action_start(self) -> None:
        if self.campaign is not None:
            return
        argv = self.command()

        def answered(ok: bool | None) -> None:
            if ok and self.campaign is None:
                self.campaign = True  # starting: the keys that need an idle screen are off
                self.refresh_bindings()
                self._status("starting the campaign: pre-flight of every candidate …")
                self._start_worker(argv)

        self.app.push_screen(
            ConfirmModal(
                "Start this campaign on the host? It stops what runs there first (asked), then launches "
                "and measures every candidate in turn.\n\n" + shlex.join(argv),
                title="Start a tuning campaign",
                action="Start it",
                cancel="Not now",
            ),
            answered,
        )

    async def _default_start(self, args: Any, plan: tuple[Any, ...], confirm: Any, on_skip: Any) -> Any:
        from tui.commands.tune import start_campaign

        host = getattr(self.app, "host", None)
        if host is None:
            raise RuntimeError("the dashboard has no host to run on")
        return await start_campaign(host, args, plan, confirm_stop=confirm, on_skip=on_skip)

    @work(group="tune", exit_on_error=False)
    async def _start_worker(self, argv: list[str]) -> None:
        got = await self._plan(argv)
        if isinstance(got, str):
            self._not_started(got)
            return
        args, plan = got
        skipped: list[str] = []

        def on_skip(name: str, why: str) -> None:
            skipped.append(f"{name}: skipped: {why}")

        start = self.start_campaign or self._default_start
        try:
            campaign = await start(args, plan, self._confirm, on_skip)
        except Exception as e:  # one line on the screen; the log has the rest
            log.warning("campaign not started: %s", e, exc_info=not isinstance(e, (ValueError, OSError)))
            self._not_started(f"cannot start the campaign: {e}")
            self.post_message(TuneFindings(skipped, title="pre-flight:"))
            return
        if skipped:
            self.post_message(TuneFindings(skipped, title="pre-flight findings (skipped):"))
        from tui.profiles.deploy import profile_gpus

        cands = plan[1]
        self.progress = TuneProgress(
            ((c.name, profile_gpus(c.profile)) for c in cands),
            campaign=str(getattr(campaign, "id", "")),
            estimate_s=plan[5].total_s,
        )
        for line in skipped:
            self.progress.feed(ABEvent("info", line, line.split(": skipped: ")[0]))
        self.campaign = campaign
        self.refresh_bindings()
        self.show(self.progress.snapshot(now=time.time()))
        self.notify(f"campaign job {campaign.id} runs on the host; ctrl+x cancels it", markup=False)
        await self._follow(campaign)

    def _not_started(self, why: str) -> None:
        self.campaign = None
        self.refresh_bindings()
        self._status(Text(why, style="bold"))

    async def _confirm(self, question: str) -> bool:
        modal = ConfirmModal(question, title="Stop a running server?", action="Stop it", cancel="Keep it", danger=True)
        answer: bool | None = await self.app.push_screen_wait(modal)
        return bool(answer)

    # ------------------------------------------------------------------ follow
    @work(group="tune", exit_on_error=False)
    async def _reattach(self) -> None:
        """Follow a campaign still running on the app's host (started earlier, maybe elsewhere)."""
        from tui.hostops.hosts import HostError
        from tui.services import jobs
        from tui.services.tunerun import TuneRun

        host = getattr(self.app, "host", None)
        if host is None or self.campaign is not None:
            return
        try:
            running = [j for j in await jobs.list_jobs(host, "tune") if j.alive]
        except HostError as e:
            log.info("no campaign to reattach: %s", e)
            return
        if not running or self.campaign is not None:
            return
        run = TuneRun(host, running[-1])
        self.campaign = run
        self.refresh_bindings()
        try:
            spec = await run.spec()
        except HostError as e:
            log.warning("campaign %s: spec not read: %s", run.id, e)
            spec = {}
        cands = [(str(c.get("name")), int(c.get("tp") or 1)) for c in spec.get("candidates") or ()]
        est = spec.get("estimate_s")
        self.progress = TuneProgress(
            cands,
            campaign=str(spec.get("campaign") or run.id),
            estimate_s=est if isinstance(est, (int, float)) else None,
        )
        self.show(self.progress.snapshot(now=time.time()))
        self.notify(f"following campaign job {run.id}, still running on the host", markup=False)
        await self._follow(run)

    async def _follow(self, campaign: Any) -> None:
        campaign.on_link_error = lambda e, attempt: self.post_message(TuneLink(str(e)))
        campaign.on_link_ok = lambda: self.post_message(TuneLink(None))
        try:
            async for ev in campaign.events():
                self.post_message(TuneEvent(ev))
        except Exception as e:  # the link died for good, or the job folder went away
            log.warning("campaign follow ended: %s", e, exc_info=True)
            self.post_message(
                TuneEnded(None, f"lost the campaign: {e}; it goes on on the host (T reopens this screen)")
            )
            return
        rep = getattr(campaign, "report", None)
        if rep is None:
            ex = getattr(campaign, "exit", None) or {}
            why = (
                "its report could not be read from the host; `tunedeck tune --attach` reads it"
                if getattr(campaign, "lost", False)
                else f"ended without a report: {ex.get('error') or 'unknown'}"
            )
            self.post_message(TuneEnded(None, f"campaign {campaign.id}: {why}"))
            return
        self.post_message(TuneEnded(rep))

    @on(TuneEvent)
    def _event(self, msg: TuneEvent) -> None:
        ev = msg.event
        if ev.kind != "bench-progress":
            self.query_one("#tune-log", Log).write_line(ev.line())
        if self.progress is None:
            self.progress = TuneProgress()
        self.progress.feed(ev)
        self.show(self.progress.snapshot(now=time.time()))

    @on(TuneLink)
    def _link_changed(self, msg: TuneLink) -> None:
        if self.campaign is None:
            return
        if msg.error is None:
            if self.link.ok() is None:
                return
        elif not self.link.lost(msg.error):
            return
        self._show_status()

    @on(TuneEnded)
    def _ended(self, msg: TuneEnded) -> None:
        self.link.ok()
        self.campaign = None
        self.refresh_bindings()
        if msg.report is None:
            self._status(Text(msg.error or "the campaign ended", style="bold"))
            return
        if self.progress is None:
            self.progress = TuneProgress()
        self.progress.apply_report(msg.report)
        self.show(self.progress.snapshot())

    def action_cancel_campaign(self) -> None:
        """Ask first (Cancel has the focus); only a yes cancels the running campaign."""
        campaign = self.campaign
        if campaign is None or campaign is True:
            return

        def done(ok: bool | None) -> None:
            if ok and self.campaign is campaign:
                self._status("cancelling: stopping the server the campaign started …")
                self._cancel_worker(campaign)

        self.app.push_screen(
            ConfirmModal(
                "Cancel the running campaign? It stops the measurement in flight and the server the "
                "campaign started; finished candidates are kept.",
                title="Cancel the campaign",
                action="Cancel the campaign",
                cancel="Keep running",
                danger=True,
            ),
            done,
        )

    @work(group="tune-cancel", exit_on_error=False)
    async def _cancel_worker(self, campaign: Any) -> None:
        try:
            msg = await campaign.cancel()
        except Exception as e:  # noqa: BLE001 - shown, the campaign is still followed
            log.warning("campaign cancel failed: %s", e)
            self.notify(f"cancel failed: {e}", severity="error", markup=False)
            return
        self.notify(str(msg), markup=False)

    # ------------------------------------------------------------------ view
    def show(self, snap: TuneSnapshot) -> None:
        """Render a snapshot: the status line, the table, the chart."""
        from tui.fmt import eta

        head = Text()
        head.append(f"campaign {snap.campaign or '?'}", style="bold")
        head.append(f" · {snap.status}")
        if snap.round > 1:
            head.append(f" · round {snap.round}")
        counts = snap.counts
        if counts:
            head.append(" · " + ", ".join(f"{n} {s}" for s, n in counts.items()), style="dim")
        best = next((c for c in snap.candidates if c.name == snap.best), None)
        partial = snap.status == "partial"  # its job ended without a report: what its folder holds
        lead = "best so far" if snap.status == "running" else "best of the measured" if partial else "winner"
        head.append(f"\n{lead}: ", style="bold")
        if best is not None and best.capacity is not None:
            head.append(f"{best.name} (capacity C={best.capacity:.0f})")
        else:
            head.append(
                "none yet" if snap.status == "running" else f"no {'measured ' if partial else ''}candidate met the SLO"
            )
        if snap.eta_s is not None:
            head.append(f" · ETA {eta(snap.eta_s)} this round ({snap.eta_basis})")
        if snap.error:
            head.append(f"\n{snap.error}", style="bold red")
        self._status(head)
        self._fill_table(snap)
        index = {c.name: i + 1 for i, c in enumerate(snap.candidates)}
        self.query_one(FrontierChart).show(
            [(str(index[c.name]), c.tok_s_per_user or 0.0, c.tok_s_per_gpu or 0.0, c.pareto) for c in snap.frontier]
        )

    def _fill_table(self, snap: TuneSnapshot) -> None:
        table = self.query_one("#tune-table", DataTable)
        with self.app.batch_update():
            base = snap.candidates[0].name if snap.candidates else ""
            for i, c in enumerate(snap.candidates, 1):
                mark = "*" if c.pareto else " "
                # the others are the base with changes: their changes say which one they are
                short = c.name[len(base) :] if i > 1 and base and c.name.startswith(base + "+") else c.name
                note = c.note[len(c.name) + 1 :].lstrip(": ") if c.note.startswith(c.name) else c.note
                cells = {
                    "n": str(i),
                    "name": Text(mark + short, style="bold" if c.name == snap.best else ""),
                    "state": Text(c.state, style=STATE_STYLE.get(c.state, "")),
                    "step": Text(c.step or note),
                    "capacity": "-" if c.capacity is None else f"{c.capacity:.0f}",
                    "per_user": "-" if c.tok_s_per_user is None else f"{c.tok_s_per_user:.1f}",
                    "per_gpu": "-" if c.tok_s_per_gpu is None else f"{c.tok_s_per_gpu:.1f}",
                }
                if c.name not in table.rows:
                    table.add_row(*(cells[k] for k, _ in COLUMNS), key=c.name)
                    continue
                for key, _ in COLUMNS:
                    if str(table.get_cell(c.name, key)) != str(cells[key]):
                        table.update_cell(c.name, key, cells[key])


__all__ = ["TuneEnded", "TuneEvent", "TuneFindings", "TuneLink", "TuneScreen"]
