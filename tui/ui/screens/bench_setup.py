"""Bench mode: pick a server, set the workload, start ``tunedeck bench`` (live charts in
:class:`~tunedeck.ui.screens.bench.BenchScreen`), and read stored results.

Left: the servers known on the host (the app's server feed) and the form: URL (optional; overrides
the selected server), the workload source (``--dataset-name``, its file and its options, with a
preview of what each level will send: lengths, their histogram, the prefix-sharing ratio, built by
the function ``tunedeck bench --preview`` prints), endpoint, concurrency list, prompts,
input/output length, warmup, ignore_eos, and goodput targets (TTFT / TPOT / ITL / E2EL in ms, each
optional: ``--goodput``).
``ctrl+r`` starts the benchmark; ``enter`` only picks a server or moves to the next field (a load
test on a shared server is never one stray keystroke away). The bench always runs in its own
local process: for a remote host it reaches the server through ``host.forward_port`` exactly as
``tunedeck bench --host H --port P`` does; for the demo it gets ``--demo``.
Right: the stored results (``tunedeck.bench.store``); ``enter`` on one shows its summary, ``t`` its
timeline (:class:`~tunedeck.ui.screens.timeline.TimelineScreen`).
"""

from __future__ import annotations

import logging
import shlex
from typing import TYPE_CHECKING, Any, Mapping, Sequence, cast

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.coordinate import Coordinate
from textual.timer import Timer
from textual.widgets import Checkbox, DataTable, Footer, Header, Input, Label, Select, Static

from tunedeck.bench.plan import BenchPlan
from tunedeck.bench.workloads import FILE_SOURCES, SOURCES, default_ignore_eos
from tunedeck.model import ServerStats
from tunedeck.ui.bindings import filter_rows
from tunedeck.ui.screens.bench_form import SIZED_BY_FORM, SLO_FIELDS, BenchForm, BenchFormError, bench_plan
from tunedeck.ui.screens.hosted import HostScreen
from tunedeck.widgets.field_input import FieldInput
from tunedeck.widgets.filter_table import FilterTable, TableFilter

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # pragma: no cover
    from tunedeck.ui.app import TunedeckApp


#: the placeholder of a goodput target left empty
_SLO_HINT = "none (goodput: a request within every target)"


def _field(label: str, value: str, id: str, placeholder: str = "", *, disabled: bool = False) -> tuple[Label, Input]:
    """A row of the workload form: its label, then its compact input."""
    return Label(label), FieldInput(value, placeholder=placeholder, id=id, compact=True, disabled=disabled)


def _choice(label: str, names: Sequence[str], value: str, id: str) -> tuple[Label, Select[str]]:
    """A row of the workload form: its label, then a compact choice among ``names``."""
    return Label(label), Select([(name, name) for name in names], value=value, allow_blank=False, id=id, compact=True)


class BenchSetupScreen(HostScreen):
    """Servers + benchmark form + stored results."""

    DEFAULT_CSS = """
    BenchSetupScreen #bs-left { width: 64; border-right: solid $panel; padding: 0 1; scrollbar-gutter: stable; }
    BenchSetupScreen #bs-right { width: 1fr; padding: 0 1; }
    BenchSetupScreen #bs-servers { height: auto; max-height: 8; min-height: 3; }
    BenchSetupScreen #bs-form { grid-size: 2; grid-columns: 14 1fr; grid-rows: 1; grid-gutter: 1 0;
                                height: auto; }
    BenchSetupScreen #bs-form Checkbox { border: none; padding: 0; height: 1; }
    BenchSetupScreen .bs-title { text-style: bold; margin: 1 0 0 0; }
    BenchSetupScreen #bs-servers-note { height: auto; color: $text-muted; }
    BenchSetupScreen #bs-command { height: auto; color: $text-muted; }
    BenchSetupScreen #bs-error { height: auto; color: $error; }
    BenchSetupScreen #bs-preview { height: auto; margin: 1 0 0 0; }
    BenchSetupScreen #bs-results { height: 1fr; min-height: 5; }
    BenchSetupScreen #bs-summary { height: auto; }
    """

    BINDINGS = [
        Binding(
            "ctrl+r",
            "start",
            "Start bench",
            tooltip="Benchmark the selected server with this form",
            id="bench-setup-start",
            priority=True,
        ),
        Binding("f5", "reload_results", "Reload results", tooltip="Re-read the results store", id="bench-setup-reload"),
        Binding(
            "ctrl+a",
            "attach",
            "Attach",
            tooltip="Follow the newest benchmark still running on the host",
            id="bench-setup-attach",
            priority=True,
        ),
        filter_rows("bench-setup", "stored results", action="filter_results", description="Filter results"),
        Binding(
            "t",
            "timeline",
            "Timeline",
            tooltip="The highlighted result's GPU and server timeline, with its validity findings",
            id="bench-setup-timeline",
        ),
    ]

    def __init__(self, *, host: Any = None, demo: bool = False, form: BenchForm | None = None, **kwargs: Any) -> None:
        super().__init__(host=host, demo=demo, **kwargs)
        self.initial = form or BenchForm()
        #: row key → server snapshot shown in the server list
        self.servers: dict[str, ServerStats] = {}
        #: row key → stored result (tunedeck.bench.store.RunInfo)
        self.results: dict[str, Any] = {}
        #: how many reads of the stored results have been shown (they are read in a thread)
        self.results_read = 0
        #: the plan of the last benchmark started from here
        self.last_plan: BenchPlan | None = None
        #: the plan the preview shows (or is being built for), and its pending start
        self._preview_for: BenchPlan | None = None
        self._preview_timer: Timer | None = None

    @property
    def tapp(self) -> "TunedeckApp":
        return cast("TunedeckApp", self.app)

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        f = self.initial
        yield Header(icon="◆")
        with Horizontal():
            with VerticalScroll(id="bs-left"):
                yield Label("Servers on the host", classes="bs-title", id="bs-servers-title")
                yield DataTable(id="bs-servers", cursor_type="row")
                yield Static("waiting for the server list…", id="bs-servers-note")
                yield Label("Workload", classes="bs-title")
                with Grid(id="bs-form"):
                    yield from _field("URL", f.url, "bs-url", "optional: http://HOST:PORT (else the selected server)")
                    dataset = f.dataset if f.dataset in SOURCES else "random"
                    yield from _choice("Source", SOURCES, dataset, "bs-dataset")
                    yield from _field(
                        "Dataset file",
                        f.dataset_path,
                        "bs-dataset-path",
                        "file of sharegpt/custom/mooncake/burstgpt",
                        disabled=f.dataset not in FILE_SOURCES,
                    )
                    yield from _field(
                        "Options", f.options, "bs-options", "e.g. --random-range-ratio 0.5 (docs/workloads.md)"
                    )
                    yield from _choice("Endpoint", ("completions", "chat"), f.endpoint, "bs-endpoint")
                    yield from _field("Concurrency", f.concurrency, "bs-concurrency", "1,16")
                    yield from _field("Num prompts", f.num_prompts, "bs-num-prompts", "default 5 x C, >= 10")
                    sized = f.dataset in SIZED_BY_FORM
                    yield from _field("Input len", f.input_len, "bs-input-len", disabled=not sized)
                    yield from _field("Output len", f.output_len, "bs-output-len", disabled=not sized)
                    yield from _field("Warmup", f.warmup, "bs-warmup")
                    yield Label("")
                    yield Checkbox("ignore_eos", f.ignore_eos, id="bs-ignore-eos")
                    for key, attr, name in SLO_FIELDS:
                        yield from _field(f"{name} ms", getattr(f, attr), f"bs-slo-{key}", _SLO_HINT)
                yield Static(id="bs-command")
                yield Static(id="bs-error")
                yield Static(id="bs-preview")
            with Vertical(id="bs-right"):
                yield Label("Stored results  [dim]enter: summary[/]", classes="bs-title")
                yield TableFilter("#bs-results", id="bs-results-filter")
                yield FilterTable(id="bs-results", cursor_type="row")
                yield Static(id="bs-summary")
        yield Footer()

    def on_mount(self) -> None:
        servers = self.query_one("#bs-servers", DataTable)
        for key, label in (("name", "Server"), ("engine", "Engine"), ("port", "Port"), ("state", "State")):
            servers.add_column(label, key=key)
        results = self.query_one("#bs-results", DataTable)
        for key, label in (
            ("run", "Run"),
            ("profile", "Profile"),
            ("c", "C"),
            ("done", "Done"),
            ("tok", "Out tok/s"),
            ("ttft", "TTFT p50"),
            ("state", "State"),
            ("where", "Client"),
        ):
            results.add_column(label, key=key)
        target = getattr(self.tapp, "target", "host")
        self.query_one("#bs-servers-title", Label).update(Text(f"Servers on {target}"))
        latest = getattr(self.tapp, "latest", None)
        if latest is not None and latest.servers is not None:
            self._on_servers(latest.servers)
        signal = getattr(self.tapp, "server_signal", None)
        if signal is not None:
            signal.subscribe(self, self._on_servers)
        self._show_command()
        servers.focus()

    def on_screen_resume(self) -> None:
        self.reload_results()  # each time the screen is shown, the first time too

    # ------------------------------------------------------------------ servers
    def _on_servers(self, servers: Sequence[ServerStats]) -> None:
        table = self.query_one("#bs-servers", DataTable)
        new = {f"{s.name}-{s.port}": s for s in servers}
        note = "" if new else "no servers on the host: launch one from the Launch mode (l), or type a URL"
        box = self.query_one("#bs-servers-note", Static)
        if str(box.content) != note:  # each poll calls this: an unchanged note costs the screen no new layout
            box.update(note)
        if new == self.servers:
            return
        with self.app.batch_update():
            for key in list(self.servers):
                if key not in new:
                    table.remove_row(key)
            for key, s in new.items():
                cells = (s.name, s.engine or "N/A", "N/A" if s.port is None else str(s.port), s.state)
                if key in self.servers:
                    for col, val in zip(("name", "engine", "port", "state"), cells):
                        table.update_cell(key, col, val)
                else:
                    table.add_row(*cells, key=key)
        self.servers = new
        self._show_command()

    @property
    def selected_server(self) -> ServerStats | None:
        table = self.query_one("#bs-servers", DataTable)
        if not self.servers or table.cursor_row < 0 or table.cursor_row >= table.row_count:
            return None
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        return self.servers.get(str(key))

    # ------------------------------------------------------------------ form
    def form(self) -> BenchForm:
        """The form's current values."""
        q = self.query_one
        endpoint = q("#bs-endpoint", Select).value
        dataset = q("#bs-dataset", Select).value
        return BenchForm(
            url=q("#bs-url", Input).value,
            dataset=dataset if isinstance(dataset, str) else "random",
            dataset_path=q("#bs-dataset-path", Input).value,
            options=q("#bs-options", Input).value,
            endpoint=endpoint if isinstance(endpoint, str) else "completions",
            concurrency=q("#bs-concurrency", Input).value,
            num_prompts=q("#bs-num-prompts", Input).value,
            input_len=q("#bs-input-len", Input).value,
            output_len=q("#bs-output-len", Input).value,
            warmup=q("#bs-warmup", Input).value,
            ignore_eos=q("#bs-ignore-eos", Checkbox).value,
            **{attr: q(f"#bs-slo-{key}", Input).value for key, attr, _name in SLO_FIELDS},
        )

    def current_plan(self) -> BenchPlan:
        """The benchmark the form asks for now (BenchFormError when a field is wrong)."""
        return bench_plan(self.form(), self.selected_server, target=getattr(self.tapp, "target", None), demo=self.demo)

    def _show_command(self) -> None:
        try:
            plan = self.current_plan()
        except BenchFormError as e:
            self.query_one("#bs-command", Static).update("")
            self.query_one("#bs-error", Static).update(Text(str(e)))
            self._preview_for = None
            self.query_one("#bs-preview", Static).update("")
            return
        self.query_one("#bs-error", Static).update("")
        self.query_one("#bs-command", Static).update(Text("tunedeck bench " + shlex.join(plan.to_argv())))
        self._schedule_preview(plan)

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Checkbox.Changed)
    @on(DataTable.RowHighlighted, "#bs-servers")
    def _form_changed(self) -> None:
        self._show_command()

    @on(Select.Changed, "#bs-dataset")
    def _source_changed(self, ev: Select.Changed) -> None:
        """A new source: its file field on or off, and ignore_eos at the source's default (a
        dataset of real answers ends at EOS; made-up prompts need ignore_eos for their lengths)."""
        name = ev.value if isinstance(ev.value, str) else "random"
        self.query_one("#bs-dataset-path", Input).disabled = name not in FILE_SOURCES
        for field in ("#bs-input-len", "#bs-output-len"):  # the other sources set their own lengths
            self.query_one(field, Input).disabled = name not in SIZED_BY_FORM
        self.query_one("#bs-ignore-eos", Checkbox).value = default_ignore_eos(name)
        self._show_command()

    # ------------------------------------------------------------------ preview
    #: the preview waits this long after the last change (a file is read and every prompt built)
    PREVIEW_DELAY_S = 0.4

    def _schedule_preview(self, plan: BenchPlan) -> None:
        """Preview ``plan`` once the form has been still for :attr:`PREVIEW_DELAY_S`."""
        if plan == self._preview_for:
            return
        self._preview_for = plan
        if self._preview_timer is not None:
            self._preview_timer.stop()
        self.query_one("#bs-preview", Static).update(Text("building the preview…", style="dim"))
        self._preview_timer = self.set_timer(self.PREVIEW_DELAY_S, lambda: self._preview_worker(plan))

    @work(thread=True, exclusive=True, group="bs-preview", exit_on_error=False)
    def _preview_worker(self, plan: BenchPlan) -> None:
        """Build what each level would send (files read here, in a thread), as `bench --preview`."""
        from textual.worker import get_current_worker

        from tunedeck.bench.workloads.preview import grouped, preview_lines
        from tunedeck.commands.bench import level_previews

        try:
            levels = level_previews(plan)
        except (ValueError, OSError) as e:
            text = Text(f"preview: {e}", style="red")
        except Exception:
            log.exception("workload preview failed for %s", plan)
            text = Text("preview: failed (the log has the traceback)", style="red")
        else:
            text = Text()
            for labels, p in grouped(levels):
                text.append(", ".join(labels) + "\n", style="bold")
                for line in preview_lines(p):
                    text.append("  " + line + "\n")
            text.rstrip()
        if get_current_worker().is_cancelled:
            return
        self.app.call_from_thread(self._show_preview, plan, text)

    def _show_preview(self, plan: BenchPlan, text: Text) -> None:
        if plan == self._preview_for:  # a later change has its own preview coming
            self.query_one("#bs-preview", Static).update(text)

    @on(Input.Submitted)
    def _submitted(self, ev: Input.Submitted) -> None:
        """Enter in a field moves on to the next one: a load test starts only on ctrl+r."""
        ev.stop()
        self.focus_next()

    @on(DataTable.RowSelected, "#bs-servers")
    def _server_selected(self, ev: DataTable.RowSelected) -> None:
        """Enter on a server picks it and moves to the workload form (ctrl+r starts)."""
        ev.stop()
        self.query_one("#bs-concurrency", Input).focus()

    def action_start(self) -> None:
        try:
            plan = self.current_plan()
        except BenchFormError as e:
            self.query_one("#bs-error", Static).update(Text(str(e)))
            self.notify(str(e), severity="error", markup=False)
            return
        from tunedeck.ui.screens.bench import BenchScreen

        self.last_plan = plan
        self.app.push_screen(BenchScreen(plan))

    def action_attach(self) -> None:
        self._attach_worker()

    @work(group="bench-attach", exclusive=True, exit_on_error=False)
    async def _attach_worker(self) -> None:
        """Follow a benchmark running on the host (started earlier, here or by `tunedeck bench`)."""
        from tunedeck.hostops.hosts import HostError
        from tunedeck.services import jobs
        from tunedeck.ui.screens.bench import BenchScreen

        host = self.host or getattr(self.tapp, "host", None)
        if host is None:
            self.notify("no host to look on", severity="warning")
            return
        try:
            running = [j for j in await jobs.list_jobs(host, "bench") if j.alive]
        except HostError as e:
            self.notify(f"cannot list the host's benchmarks: {e}", severity="error", markup=False)
            return
        if not running:
            self.notify("no benchmark is running on the host")
            return
        self.app.push_screen(BenchScreen(None, attach=(host, running[-1].job_id)))

    # ------------------------------------------------------------------ results
    def action_reload_results(self) -> None:
        self.reload_results()

    def reload_results(self) -> None:
        """Re-read the stored results (newest first) in a thread: a store of a few hundred levels is
        a thousand small files, read again each time the screen comes back; the rows follow."""
        self._results_worker()

    @work(thread=True, exclusive=True, group="bs-results", exit_on_error=False)
    def _results_worker(self) -> None:
        from textual.worker import get_current_worker

        read: StoredRows | str
        try:
            read = stored_rows()
        except OSError as e:
            read = f"results unreadable: {e}"
        except Exception:
            log.exception("reading the stored results failed")
            read = "results unreadable (the log has the traceback)"
        if get_current_worker().is_cancelled:
            return
        self.app.call_from_thread(self._show_results, read)

    def _show_results(self, read: StoredRows | str) -> None:
        if not self.is_attached:  # closed while its results were read
            return
        if isinstance(read, str):
            self.query_one("#bs-summary", Static).update(Text(read))
        else:
            rows, self.results = read
            self.query_one("#bs-results", FilterTable).set_rows(rows)
        self.results_read += 1

    # ------------------------------------------------------------------ results filter
    def action_filter_results(self) -> None:
        self.query_one("#bs-results-filter", TableFilter).open()

    def on_key(self, event: events.Key) -> None:
        self.query_one("#bs-results-filter", TableFilter).screen_key(event)

    def action_timeline(self) -> None:
        """Open the highlighted stored result's timeline."""
        from tunedeck.ui.screens.timeline import TimelineScreen

        table = self.query_one("#bs-results", FilterTable)
        if table.row_count == 0 or not 0 <= table.cursor_row < table.row_count:
            self.notify("no stored result highlighted")
            return
        run_id = str(table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value)
        self.app.push_screen(TimelineScreen(run_id))

    @on(DataTable.RowSelected, "#bs-results")
    def _result_selected(self, ev: DataTable.RowSelected) -> None:
        ev.stop()
        self.show_summary(str(ev.row_key.value))

    def show_summary(self, run_id: str) -> None:
        """Show the stored summary of ``run_id`` (vLLM's result block)."""
        from tunedeck.bench.metrics import format_result

        r = self.results.get(run_id)
        out = self.query_one("#bs-summary", Static)
        if r is None:
            return
        if not r.summary:
            out.update(Text(f"{run_id}: no summary (the run was interrupted; `tunedeck results {run_id}` rebuilds it)"))
            return
        try:
            text = format_result(r.summary)
        except (KeyError, TypeError, ValueError) as e:
            out.update(Text(f"{run_id}: summary unreadable ({e})"))
            return
        from tunedeck.services.benchrun import TUNNEL_NOTE, measured_through_tunnel

        head = f"{run_id}" + (f"  ({TUNNEL_NOTE})" if measured_through_tunnel(r.summary) else "")
        out.update(Text(f"{head}\n{text}"))


#: the stored-results table's rows (key, cells) and the results by run id
StoredRows = tuple[list[tuple[str, tuple[str, ...]]], dict[str, Any]]


def stored_rows() -> StoredRows:
    """The stored results as rows of the Bench screen's table, newest first (files read: call it
    off the event loop)."""
    from tunedeck.bench.store import list_runs
    from tunedeck.services.benchrun import where_label
    from tunedeck.services.jobs import origin

    rows: list[tuple[str, tuple[str, ...]]] = []
    results: dict[str, Any] = {}
    for r in sorted(list_runs(), key=lambda r: r.run_id, reverse=True):
        s = r.summary or {}
        meta = r.meta
        state = "running" if r.live else ("partial" if r.partial else "done")
        if not r.summary and origin(r.path) is not None:
            state = "on host"
        where = where_label(meta)
        if where == "tunnel":
            where = "SSH tunnel"  # measured through an SSH tunnel: the link is in the numbers

        def num(key: str, fmt: str, s: Mapping[str, Any] = s) -> str:
            v = s.get(key)
            if key == "median_ttft_ms" and s.get("completed") == 0:
                return "N/A"  # the vLLM-style summary writes 0 when no request finished
            return format(v, fmt) if isinstance(v, (int, float)) else "N/A"

        conc = meta.get("max_concurrency", s.get("max_concurrency"))
        cells = (
            r.run_id,
            str(meta.get("profile") or meta.get("label") or "-"),
            "N/A" if conc is None else str(conc),
            num("completed", "d"),
            num("output_throughput", ".1f"),
            num("median_ttft_ms", ".1f"),
            state,
            where,
        )
        rows.append((r.run_id, cells))
        results[r.run_id] = r
    return rows, results


__all__ = ["BenchSetupScreen", "stored_rows"]
