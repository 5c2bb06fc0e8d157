"""The Tune screen: start a tuning campaign, watch its candidates, read the frontier.

Left: the server profiles (``B`` makes the highlighted one the base, ``m`` marks or unmarks it as
a candidate) and the form: the vary spec (``KEY=V1,V2``, several separated by ``;``), the SLO
(TTFT p90 and TPOT p90 in ms, per-user tok/s), the workload source (and its file) and the
budget. Above the results, the exact ``tunedeck tune …`` command the campaign runs, updated as
the form changes. ``ctrl+r`` pre-flights every candidate on the host and lists the findings;
``ctrl+l`` shows the command and asks (Cancel is the default), then starts the campaign ON the
host (:func:`tunedeck.commands.tune.start_campaign`, :class:`tunedeck.services.tunerun.TuneRun`: detached,
a lost link or a closed dashboard never cuts it); ``ctrl+x`` cancels it after asking.
What starts, follows and cancels a campaign is the Compare screen's too
(:class:`tunedeck.ui.screens.campaign.CampaignScreen`).

While it runs: each candidate's state (queued, starting, measuring with the step, done, failed,
dropped, skipped), the best so far, the ETA of the round, the Pareto frontier of tok/s per user
against tok/s per GPU as a chart, and the event log (:mod:`tunedeck.ab.tuneview` folds the events).
On opening, the screen follows a campaign still running on the host. A lost link is said on
the status line until the host answers again (:class:`tunedeck.hostops.liveness.LinkWatch`).

Below :attr:`TuneScreen.NARROW` columns, as on the Compare screen, a campaign takes the whole
width (``p`` brings the profiles and the form back, so do ``B`` and ``m``) and the table keeps
each candidate's number, name, state and capacity at the SLO; the highlighted one's tok/s per
user, tok/s per GPU and step are on the line under it (:class:`tunedeck.widgets.tune_table.TuneTable`).

``start_campaign(args, plan, confirm, on_skip)`` (tests) returns an object with ``id``,
``report``, ``events()`` (an async iterator of :class:`ABEvent`) and ``cancel()``.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Footer, Input, Label, Log, OptionList, Select, Static

from tunedeck.ab.events import ABEvent
from tunedeck.ab.tuneview import TuneProgress, TuneSnapshot
from tunedeck.ui.bindings import toggle_side
from tunedeck.ui.screens.campaign import CampaignScreen
from tunedeck.ui.screens.modals import ConfirmModal
from tunedeck.widgets.frontier_chart import FrontierChart
from tunedeck.widgets.tune_table import TuneTable

if TYPE_CHECKING:
    from tunedeck.services.jobrun import JobRun

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


class TuneFindings(Message):
    """Pre-flight findings (or a refusal) to list under the command."""

    def __init__(self, lines: list[str], *, title: str) -> None:
        super().__init__()
        self.lines = lines
        """One per candidate or refusal."""
        self.title = title
        """What they are."""


class TuneScreen(CampaignScreen):
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
    TuneScreen #tune-detail { display: none; height: auto; }
    TuneScreen.-narrow #tune-detail { display: block; }
    TuneScreen #tune-log { height: 6; border-top: solid $panel; }
    """
    NOUN = "campaign"
    REOPEN_KEY = "T"
    CANCEL_QUESTION = (
        "Cancel the running campaign? It stops the measurement in flight and the server the campaign started; "
        "finished candidates are kept."
    )
    STATUS_ID = "tune-status"
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
        toggle_side("tune", "the form", "a campaign"),
    ]

    def __init__(
        self,
        *,
        start_campaign: Callable[..., Awaitable[Any]] | None = None,
        profiles: list[str] | None = None,
        base: str | None = None,
        marked: list[str] | None = None,
        snapshot: TuneSnapshot | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            start_campaign=start_campaign,
            profiles=profiles,
            status="Pick a base (B) and a vary spec or marked profiles (m), then ctrl+l.",
            **kwargs,
        )
        self.base = base
        """The base profile's name."""
        self.marked: list[str] = list(marked or [])
        """Profiles marked as candidates (besides the base)."""
        self.progress: TuneProgress | None = None
        self._initial = snapshot

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        from tunedeck.bench.workloads import SOURCES

        with Horizontal():
            with Vertical(id="tune-side", classes="campaign-side"):
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
                yield TuneTable(id="tune-table")
                yield Static(id="tune-detail")
                yield FrontierChart(id="tune-chart")
                yield Log(id="tune-log", max_lines=2000)
        yield Footer()

    def on_mount(self) -> None:
        self._set_narrow(self.app.size.width < self.NARROW)
        names = self._profile_names()
        if self.base is None and names:
            self.base = names[0]
        self._fill_profiles("tune-profiles", names, self._option_text)
        self._show_command()
        self._show_status()
        if self._initial is not None:
            self._result_shown()
            self.show(self._initial)
        if self.start_campaign is None:
            self._reattach()

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
        from tunedeck.commands.tune import command_argv

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
        from tunedeck.commands.tune import candidates_file

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
        if self._side_hidden():  # the profiles were hidden: shown now, the next key acts
            return
        name = self._highlighted()
        if name is None:
            return
        self.base = name
        if name in self.marked:
            self.marked.remove(name)
        self._refresh_options()
        self._show_command()

    def action_mark(self) -> None:
        if self._side_hidden():
            return
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
        if action in ("start", "preflight", "base", "mark"):
            return None if self.campaign is not None else True
        return super().check_action(action, parameters)

    @on(TuneFindings)
    def _findings(self, msg: TuneFindings) -> None:
        t = Text(msg.title, style="bold")
        for line in msg.lines:
            t.append("\n  " + line)
        self.query_one("#tune-findings", Static).update(t)

    # ------------------------------------------------------------------ plan, pre-flight, start
    async def _plan(self, argv: list[str]) -> tuple[Any, tuple[Any, ...]] | str:
        """(args, plan) of the command, or the one line that refuses it."""
        from tunedeck.commands.tune import parse_command, plan_of

        try:
            args = parse_command(argv)
        except ValueError as e:
            return f"tunedeck tune: {e}"
        if self.marked:
            from tunedeck.commands.tune import write_candidates_file

            try:
                write_candidates_file(args.base, self.marked, args.candidates)
            except (ValueError, OSError) as e:
                return str(e)
        # the workload is built (a dataset file read) and the journal read for the estimate:
        # in a thread, as the Bench screen builds its preview
        got = await asyncio.to_thread(plan_of, args)
        return got if isinstance(got, str) else (args, got)

    def action_preflight(self) -> None:
        if self.campaign is None:
            self._preflight_worker(self.command())

    @work(group="tune-preflight", exclusive=True, exit_on_error=False)
    async def _preflight_worker(self, argv: list[str]) -> None:
        from tunedeck.commands.tune import check_campaign
        from tunedeck.hostops.hosts import HostError

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
        from tunedeck.commands.tune import start_campaign

        host = self._app_host()
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
        campaign = await self._started(start(args, plan, self._confirm, on_skip))
        if campaign is None:
            self.post_message(TuneFindings(skipped, title="pre-flight:"))
            return
        if skipped:
            self.post_message(TuneFindings(skipped, title="pre-flight findings (skipped):"))
        from tunedeck.profiles.deploy import profile_gpus

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
        self._result_shown()
        self.show(self.progress.snapshot(now=time.time()))
        self.notify(f"campaign job {campaign.id} runs on the host; ctrl+x cancels it", markup=False)
        await self._follow(campaign)

    # ------------------------------------------------------------------ follow
    def _run_class(self) -> type[JobRun]:
        from tunedeck.services.tunerun import TuneRun

        return TuneRun

    async def _reattached(self, run: Any) -> None:
        from tunedeck.hostops.hosts import HostError

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
        self._result_shown()
        self.show(self.progress.snapshot(now=time.time()))
        self.notify(f"following campaign job {run.id}, still running on the host", markup=False)

    def _no_report(self, campaign: Any) -> str:
        if getattr(campaign, "lost", False):
            return (
                f"campaign {campaign.id}: its report could not be read from the host; `tunedeck tune --attach` reads it"
            )
        ex = getattr(campaign, "exit", None) or {}
        return f"campaign {campaign.id}: ended without a report: {ex.get('error') or 'unknown'}"

    def _show_event(self, ev: ABEvent) -> None:
        if ev.kind != "bench-progress":
            self.query_one("#tune-log", Log).write_line(ev.line())
        if self.progress is None:
            self.progress = TuneProgress()
        self.progress.feed(ev)
        self.show(self.progress.snapshot(now=time.time()))

    def _finished(self, report: Any) -> None:
        if self.progress is None:
            self.progress = TuneProgress()
        self.progress.apply_report(report)
        self.show(self.progress.snapshot())

    # ------------------------------------------------------------------ view
    def show(self, snap: TuneSnapshot) -> None:
        """Render a snapshot: the status line, the table, the chart."""
        from tunedeck.fmt import eta

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
        self.query_one(TuneTable).show(snap, compact=self.has_class("-narrow"))
        self._show_detail()
        index = {c.name: i + 1 for i, c in enumerate(snap.candidates)}
        self.query_one(FrontierChart).show(
            [(str(index[c.name]), c.tok_s_per_user or 0.0, c.tok_s_per_gpu or 0.0, c.pareto) for c in snap.frontier]
        )

    def _narrow_changed(self, narrow: bool) -> None:
        table = self.query_one(TuneTable)
        if table.snapshot is not None:
            table.show(table.snapshot, compact=narrow)
            self._show_detail()

    @on(DataTable.RowHighlighted, "#tune-table")
    def _show_detail(self) -> None:
        if self.has_class("-narrow"):
            self.query_one("#tune-detail", Static).update(self.query_one(TuneTable).detail())


__all__ = ["FIELDS", "TuneFindings", "TuneScreen"]
