"""Deterministic scenes of every screen: the SVG snapshot tests and ``scripts/screenshots.py``
build the same apps from here (posting's ``snapshot_app`` pattern).

A scene is ``build() -> (app, run_before)``: ``app`` is the real :class:`~tunedeck.ui.app.TunedeckApp`
on fake collectors (fixed data, fixed clocks: nothing live, nothing launched), ``run_before``
drives it with a Pilot to the state to capture. The profile / results / state folders must point
at empty temporary directories (the tests' conftest does it; the screenshot script too).
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Awaitable, Callable

from textual.pilot import Pilot

from tests.deployfix import tp_deployment
from tests.ui_fakes import FakeGpu, FakeHost, FakeServers, gpu_snapshot, host_stats, server
from tests.waits import until_async
from tunedeck.model import NA, GpuProcess, GpuStatus, StartupProgress
from tunedeck.ui.app import TunedeckApp, make_app

REPO = Path(__file__).resolve().parent.parent
TARGET = "gpuop@gpu-box-01"
GPU = {"name": "NVIDIA H200", "memory_total": 143771.0}  # the same GPU in every shot

Scene = Callable[[], tuple[TunedeckApp, Callable[[Pilot], Awaitable[None]]]]


def h200_status(n: int = 8, t: int = 0) -> GpuStatus:
    gpus = tuple(gpu_snapshot(i, t, **GPU, memory_used=float(30000 + 9000 * i + 100 * (t % 10))) for i in range(n))
    procs = tuple(
        GpuProcess(
            pid=4000 + i,
            name="sglang::scheduler_TP" + str(i),
            gpu_uuid=g.uuid,
            gpu_index=i,
            used_memory=float(g.memory_used) - 500,
        )
        for i, g in enumerate(gpus)
        if i < 4
    )
    return GpuStatus(state="ok", gpus=gpus, processes=procs, time=1_700_000_000.0 + t)


TICKS = 30


def servers_at(t: int) -> tuple:
    """The servers at tick ``t``: a ready SGLang under a varying load, a vLLM still starting."""
    load = (3 * t) % 16
    return (
        server(
            "sglang-tuned",
            "ready",
            running=float(load),
            waiting=float(max(0, load - 10)),
            kv_cache_usage=0.2 + 0.04 * load,
            gen_throughput=110.0 * load + 40.0,
        ),
        server(
            "vllm-baseline",
            "starting",
            engine="vllm",
            model="/models/Llama-3.1-70B-Instruct",
            port=8000,
            running=NA,
            waiting=NA,
            kv_cache_usage=NA,
            gen_throughput=NA,
            ttft_p50=NA,
        ),
    )


def _servers() -> FakeServers:
    return FakeServers(*[servers_at(t) for t in range(TICKS)])


def base_app(ticks: int = TICKS, interval: float = 0.01) -> TunedeckApp:
    """The dashboard on fixed feeds. ``interval``: the host and server polls' (the scenes poll fast to
    settle, then go quiet; a test that drives the app as it is polls at an operator's pace, since a
    100-Hz poll keeps the app busy and every Pilot pause then waits its full second for an idle loop)."""
    gpu = FakeGpu([h200_status(8, t) for t in range(ticks)], interval=0.001)
    app = make_app(
        gpu=gpu, host_source=FakeHost(host_stats()), servers=_servers(), target=TARGET, interval=interval, keymap={}
    )
    return app


async def _until(pilot: Pilot, pred: Callable[[], bool], timeout: float = 30.0) -> None:
    await until_async(pred, timeout, pilot=pilot, step=0.02, what="the scene did not reach its state")


async def _settled(app: TunedeckApp, pilot: Pilot) -> None:
    """The feeds are exhausted (last GPU tick drawn, servers and host sampled)."""
    await _until(
        pilot,
        lambda: (
            app.latest.gpu.time == 1_700_000_000.0 + TICKS - 1 and app.latest.servers is not None and app.latest.link.ok
        ),
    )
    app.interval = 3600.0  # the feeds go quiet (each loop sleeps after its current poll): a still frame
    await pilot.pause(0.1)
    # the server feed ran at its own pace: give every run the same history, whatever it was
    from tunedeck.widgets.server_panel import ServerHistory

    app.server_history = ServerHistory(maxlen=60)
    for t in range(TICKS):
        app.server_history.add(servers_at(t))
    app.latest.servers = servers_at(TICKS - 1)
    await pilot.pause(0.6)  # the status screen draws at most twice a second


Drive = Callable[[TunedeckApp, Pilot], Awaitable[None]]


def scene(drive: Drive) -> Scene:
    """A scene on :func:`base_app`: ``drive(app, pilot)`` takes it on from the settled status screen."""

    def build() -> tuple[TunedeckApp, Callable[[Pilot], Awaitable[None]]]:
        app = base_app()

        async def run_before(pilot: Pilot) -> None:
            await _settled(app, pilot)
            await drive(app, pilot)

        return app, run_before

    return build


def mid_weight_loading(run_id: str, **more: Any) -> StartupProgress:
    """An SGLang start-up at safetensors shard 8 of 13 (41 %, 34 s to go by the load history)."""
    return StartupProgress(
        run_id,
        "sglang",
        "starting",
        "weight-loading",
        phase_label="safetensors shards",
        phase_progress=8 / 13,
        phase_n=8,
        phase_total=13,
        fraction=0.41,
        elapsed=23.0,
        eta=34.0,
        eta_source="history",
        **more,
    )


class _Target:
    """Stands for the host on screens that only need one to offer their keys (nothing runs)."""

    target = TARGET


# ---------------------------------------------------------------------------------------- scenes
@scene
async def status(app: TunedeckApp, pilot: Pilot) -> None:
    app.screen.redraw()  # type: ignore[attr-defined]
    await pilot.pause(0.1)


@scene
async def profiles(app: TunedeckApp, pilot: Pilot) -> None:
    from tunedeck.profiles.preflight import Finding
    from tunedeck.ui.screens.profiles import ProfilesScreen

    await pilot.press("l")
    await _until(pilot, lambda: isinstance(app.screen, ProfilesScreen))
    scr: Any = app.screen
    scr.host = _Target()
    names = list(scr.profiles)
    scr.table.move_cursor(row=names.index("sglang-base"))
    await pilot.press("1")
    scr.table.move_cursor(row=names.index("sglang-tuned"))
    await pilot.press("2")
    report = SimpleNamespace(
        profile="sglang-tuned",
        findings=(
            Finding("info", "gpus", "8 × NVIDIA H200 (SM90)"),
            Finding("info", "engine", "sglang 0.5.23 (read from host); 25 backends from help"),
            Finding(
                "warning",
                "backend-arch-unverified",
                "'flashinfer' passes argument checks on SM90 for MLA models but is unverified there; "
                "verify on the host",
                "attention_backend",
            ),
        ),
    )
    scr.reports["sglang-tuned"] = report
    scr._show_report(report)
    scr.refresh_bindings()
    await pilot.pause(0.2)


@scene
async def launch_form(app: TunedeckApp, pilot: Pilot) -> None:
    from textual.widgets import Input

    from tunedeck.profiles.store import ProfileStore
    from tunedeck.ui.screens.launch import LaunchScreen

    await app.push_screen(LaunchScreen(ProfileStore().get("sglang-tuned")))
    await _until(pilot, lambda: isinstance(app.screen, LaunchScreen))
    await pilot.pause(0.2)
    scr: Any = app.screen
    scr.query_one("#tp", Input).value = "4"  # an unsaved edit: the title and the diff say so
    app.set_focus(None)
    from tunedeck.widgets.preset_form import PresetForm

    await _until(
        pilot,
        lambda: (
            "unsaved" in str(scr.query_one("#launch-title").render())
            and any(m.key == "vs saved" for m in scr.query_one(PresetForm).messages)
        ),
    )
    await pilot.pause(0.3)


async def _no_campaign(*_args: object) -> None:
    raise RuntimeError("snapshots never start an A/B")


@scene
async def run(app: TunedeckApp, pilot: Pilot) -> None:
    from tunedeck.hostops.runstore import RunRecord
    from tunedeck.ui.screens.run import RunScreen
    from tunedeck.widgets.server_log import ServerLog
    from tunedeck.widgets.startup_progress import StartupProgressView

    # the simulator's own SGLang start-up (timestamps fixed), cut mid weight-loading
    log = REPO / "tests" / "data" / "logs" / "sglang-start-snapshot.log"
    lines = log.read_text(errors="replace").splitlines()[1:]  # the first is the file's provenance
    cut = next(i for i, ln in enumerate(lines) if "| 8/13" in ln) + 1

    class ShotRun(RunScreen):
        def _start_following(self) -> None:  # nothing to follow: the log is fed below
            pass

    rec = RunRecord(
        run_id="20250308-122905-7f3a",
        target=TARGET,
        argv=[
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "Qwen/Qwen2.5-32B-Instruct",
            "--tp-size",
            "4",
            "--port",
            "30000",
            "--enable-metrics",
        ],
        engine="sglang",
        port=30000,
        profile="sglang-tuned",
        pid=48213,
        status="starting",
    )
    scr = ShotRun(_Target(), rec)  # type: ignore[arg-type]
    await app.push_screen(scr)
    await pilot.pause(0.1)
    view = scr.query_one(ServerLog)
    view.append_lines(lines[:cut])
    view.flush_now()
    scr.query_one(StartupProgressView).update(
        mid_weight_loading(rec.run_id, health="down", gpu_memory=(9120.0, 9120.0, 9118.0, 9118.0), time=1_741_436_958.0)
    )
    await pilot.pause(0.3)


def bench_script() -> list[dict]:
    """Progress lines of a 2-level sweep (C=1 done, C=16 running), as ``tunedeck bench --progress`` prints."""
    levels = [
        {"level": 0, "concurrency": 1, "request_rate": "inf"},
        {"level": 1, "concurrency": 16, "request_rate": "inf"},
    ]
    msgs: list[dict] = [{"type": "start", "levels": levels, "goodput": {"ttft": 200.0, "tpot": 50.0}}]
    for level, conc, secs, base in ((0, 1, 10, 88.0), (1, 16, 9, 1190.0)):
        msgs.append(
            {
                "type": "level_start",
                "level": level,
                "concurrency": conc,
                "request_rate": "inf",
                "run_id": f"20250308-1240{level}0-c{conc}",
            }
        )
        total = 10 if conc == 1 else 80
        for sec in range(secs):
            ramp = min(1.0, (sec + 1) / 3)
            tok = round(base * ramp + (sec * 37 % 11) * (conc / 4), 1)
            done = min(total, (sec + 1) * (1 if conc == 1 else 7))
            msgs.append(
                {
                    "type": "tick",
                    "level": level,
                    "second": sec,
                    "t": sec + 1.0,
                    "tok_s": tok,
                    "completed": done,
                    "total": total,
                    "failed": 0,
                    "in_flight": 0 if done >= total else conc,
                    "good": done - done // 9,
                    "cpu": [0.21 + 0.01 * (sec % 3)],
                    "ttft_p50_ms": 41.0 + 6 * level,
                    "ttft_p99_ms": 58.0 + 40 * level,
                    "itl_p50_ms": 11.2 + 2.5 * level,
                    "itl_p99_ms": 14.9 + 4 * level,
                }
            )
            msgs.append(
                {
                    "type": "timeline",
                    "level": level,
                    "run_id": f"20250308-1240{level}0-c{conc}",
                    "row": timeline_row(sec, tok, conc),
                }
            )
        if level == 0:
            msgs.append(
                {
                    "type": "level_done",
                    "level": 0,
                    "summary": {
                        "completed": 10,
                        "failed": 0,
                        "duration": 10.2,
                        "output_throughput": 86.4,
                        "per_user_output_throughput": 86.4,
                        "max_concurrency": 1,
                        "median_ttft_ms": 41.3,
                        "p99_ttft_ms": 57.8,
                        "median_itl_ms": 11.2,
                        "p99_itl_ms": 14.8,
                        "request_throughput": 0.98,
                        "mean_ttft_ms": 42.0,
                        "mean_tpot_ms": 11.31,
                        "request_goodput": 0.98,
                        "client_bound": False,
                        "machine_busy": False,
                        "validity": [],
                    },
                }
            )
    return msgs


def bench_sweep_script() -> list[dict]:
    """Progress lines of a finished 3-level sweep with goodput targets; the client is the limit at C=128."""
    concs = (1, 32, 128)
    msgs: list[dict] = [
        {
            "type": "start",
            "levels": [{"concurrency": c, "request_rate": "inf"} for c in concs],
            "goodput": {"ttft": 500.0, "tpot": 50.0, "itl": 120.0},
        }
    ]
    results = (  # completed, failed, duration, req/s, tok/s, TTFT mean/p99, TPOT mean, ITL p99, goodput req/s
        (10, 0, 11.6, 0.86, 110.3, 38.2, 51.0, 8.92, 11.40, 0.86),
        (160, 0, 14.9, 10.74, 1374.6, 121.5, 402.7, 22.31, 61.85, 10.07),
        (637, 3, 19.8, 32.17, 4117.9, 688.0, 2310.4, 29.64, 140.22, 12.42),
    )
    health = (
        {},
        {},
        {
            "client_bound": True,
            "machine_busy": True,
            "client": {
                "client_bound_reason": "a client process used 0.96 of a core",
                "machine_busy_reason": "load 9.4 on 8 cores",
            },
        },
    )
    for level, (conc, r, h) in enumerate(zip(concs, results, health)):
        done, failed, dur, rps, tok, ttft, ttft99, tpot, itl99, good = r
        msgs.append(
            {
                "type": "level_start",
                "level": level,
                "concurrency": conc,
                "request_rate": "inf",
                "run_id": f"20250308-1310{level}0-c{conc}",
            }
        )
        secs = int(dur)
        for sec in range(secs):
            ramp = min(1.0, (sec + 1) / 3)
            msgs.append(
                {
                    "type": "tick",
                    "level": level,
                    "second": sec,
                    "t": sec + 1.0,
                    "tok_s": round(tok * ramp + (sec * 37 % 11) * (conc / 8), 1),
                    "completed": done * (sec + 1) // (secs + 1),
                    "total": done + failed,
                    "failed": 0,
                    "in_flight": conc,
                    "cpu": [min(0.97, 0.05 + 0.0075 * conc)],
                    "good": int(good * (sec + 1)),
                    "ttft_p50_ms": ttft * 0.9,
                    "ttft_p99_ms": ttft99,
                    "itl_p50_ms": tpot * 0.95,
                    "itl_p99_ms": itl99,
                }
            )
        msgs.append(
            {
                "type": "level_done",
                "level": level,
                "summary": {
                    "completed": done,
                    "failed": failed,
                    "duration": dur,
                    "request_throughput": rps,
                    "output_throughput": tok,
                    "per_user_output_throughput": tok / conc,
                    "max_concurrency": conc,
                    "mean_ttft_ms": ttft,
                    "median_ttft_ms": ttft * 0.9,
                    "p99_ttft_ms": ttft99,
                    "mean_tpot_ms": tpot,
                    "median_itl_ms": tpot * 0.95,
                    "p99_itl_ms": itl99,
                    "request_goodput": good,
                    "client_bound": False,
                    "machine_busy": False,
                    **h,
                },
            }
        )
    msgs.append({"type": "done", "run_ids": [f"20250308-1310{i}0-c{c}" for i, c in enumerate(concs)]})
    return msgs


def timeline_row(sec: int, tok_s: float, conc: int, *, gpus: int = 8, cap: float = 700.0, throttle_at: int = 6) -> dict:
    """One ``timeline.jsonl`` line of a level at concurrency ``conc`` (fixed, made-up figures): the
    queue fills, the KV cache grows, power climbs to the cap and the SM clock drops from
    second ``throttle_at``."""
    ramp = min(1.0, (sec + 1) / 3)
    load = conc / 16
    running = float(min(conc, round(conc * ramp)))
    waiting = float(max(0, sec - 4) if conc > 1 else 0)
    power = 90.0 + (cap - 90.0) * min(1.0, 0.35 + 0.6 * load * ramp + 0.02 * sec)
    clock = 1980.0 if sec < throttle_at or conc == 1 else 1755.0 - 15 * (sec % 2)
    return {
        "second": sec,
        "t": sec + 1.0,
        "wall": 1_741_437_600.0 + sec,
        "client": {"tok_s": tok_s, "in_flight": conc, "completed": None, "failed": 0},
        "gpu": {
            "util": [92.0 * load * ramp] * gpus,
            "mem_used": [130000.0] * gpus,
            "sm_clock": [clock] * gpus,
            "power": [round(power, 1)] * gpus,
            "power_limit": [cap] * gpus,
            "temp": [55.0 + 10 * load] * gpus,
            "sm_clock_max": [1980.0] * gpus,
        },
        "server": {
            "running": running,
            "waiting": waiting,
            "kv": round(0.02 + 0.5 * load * ramp + 0.03 * sec, 3),
            "preemptions": 0.0,
            "gen_tok_s": tok_s,
        },
    }


async def _bench(app: TunedeckApp, pilot: Pilot, keys: tuple[str, ...] = ()) -> None:
    """The Bench screen mid-sweep (C=1 done, C=16 running); ``keys`` pressed before the shot."""
    from tunedeck.timeline_model import TimelineSnapshot
    from tunedeck.ui.screens.bench import BenchScreen
    from tunedeck.widgets.throughput_chart import ThroughputChart
    from tunedeck.widgets.timeline_charts import TimelinePanel

    class ShotBench(BenchScreen):
        def run_bench(self) -> None:  # type: ignore[override]  # scripted, nothing runs
            for m in bench_script():
                self._feed_timeline(m)  # what the run worker does with each event
                self.post_message(self.Progress(m))

    scr = ShotBench(["--host", TARGET, "--port", "30000", "--concurrency", "1,16"])
    await app.push_screen(scr)
    panel = scr.query_one(TimelinePanel)
    await _until(
        pilot,
        lambda: (
            len(scr._level_info) == 2
            and scr.last_tick.get("second") == 8
            and len(scr.timelines.get(1, TimelineSnapshot()).rows) == 9
            and panel.figure is not None
            and panel.figure.seconds == 9
        ),
    )
    for key in keys:
        await pilot.press(key)
    await pilot.pause(0.1)
    for chart in scr.query(ThroughputChart):
        chart.refresh()  # draw the final data now, not at the next 1 s tick
    panel.redraw()
    await pilot.pause(0.2)


@scene
async def bench_sweep(app: TunedeckApp, pilot: Pilot) -> None:
    """The end of a finished sweep: the per-level table with goodput and client-health marks."""
    from tunedeck.ui.screens.bench import BenchScreen
    from tunedeck.widgets.throughput_chart import ThroughputChart

    class ShotSweep(BenchScreen):
        def run_bench(self) -> None:  # type: ignore[override]  # scripted, nothing runs
            for m in bench_sweep_script():
                self.post_message(self.Progress(m))
            self.post_message(self.Finished(0, [], ""))

    scr = ShotSweep(["--host", TARGET, "--port", "30000", "--concurrency", "1,32,128"])
    await app.push_screen(scr)
    await _until(pilot, lambda: scr.rc == 0 and len(scr.sweep_levels) == 3)
    for chart in scr.query(ThroughputChart):
        chart.refresh()
    await pilot.pause(0.2)


async def _bench_setup(app: TunedeckApp, pilot: Pilot) -> Any:
    """Open the Bench setup form (``b``) and wait for its first preview and its stored results: both
    are read in a thread, and a snapshot taken before they land shows "building the preview…" or
    an empty table (a loaded machine)."""
    from tunedeck.ui.screens.bench_setup import BenchSetupScreen

    await pilot.press("b")
    await _until(pilot, lambda: isinstance(app.screen, BenchSetupScreen))
    scr: Any = app.screen
    await _until(pilot, lambda: "could serve" in str(scr.query_one("#bs-preview").content))
    await _until(pilot, lambda: scr.results_read)  # the stored results are read in a thread too
    return scr


@scene
async def bench_setup_slo(app: TunedeckApp, pilot: Pilot) -> None:
    """The bench form with goodput targets, one of them mistyped: the error line names the field."""
    from textual.widgets import Input

    scr = await _bench_setup(app, pilot)
    for key, value in (("ttft", "500"), ("tpot", "50"), ("itl", "12O")):
        scr.query_one(f"#bs-slo-{key}", Input).value = value
    app.set_focus(None)
    await _until(pilot, lambda: "ITL SLO" in str(scr.query_one("#bs-error").content))
    scr.query_one("#bs-left").scroll_end(animate=False)  # the SLO fields and the error line in view
    await pilot.pause(0.2)


@scene
async def bench_setup(app: TunedeckApp, pilot: Pilot) -> None:
    await _bench_setup(app, pilot)
    await pilot.pause(0.2)


@scene
async def bench_setup_workload(app: TunedeckApp, pilot: Pilot) -> None:
    """The bench form on a shared-prefix workload: its preview (lengths, sharing ratio) in view."""
    from textual.widgets import Input, Select

    scr = await _bench_setup(app, pilot)
    scr.query_one("#bs-dataset", Select).value = "shared_prefix"
    scr.query_one("#bs-options", Input).value = "--gsp-num-groups 8 --gsp-prompts-per-group 32"
    scr.query_one("#bs-concurrency", Input).value = "1,32"
    app.set_focus(None)
    await _until(pilot, lambda: "256 requests" in str(scr.query_one("#bs-preview").content))
    scr.query_one("#bs-left").scroll_end(animate=False)
    await pilot.pause(0.2)


def _client_health_at_peak(e: dict) -> dict:
    """The recorded A/B with its C=16 client-health verdicts given their reasons, B's machine busy too."""
    why = {
        "a": {"client_bound_reason": "a client process used 0.93 of a core"},
        "b": {
            "client_bound_reason": "loop lag p99 7.9 ms with the client at 0.71 of a core",
            "machine_busy": True,
            "machine_busy_reason": "steal 9 %",
        },
    }
    for side, extra in why.items():
        for run in e[side]["runs"]:
            for lv in run["levels"]:
                if lv["concurrency"] == 16:
                    lv["summary"]["client"].update(extra)
                    lv["summary"]["machine_busy"] = bool(extra.get("machine_busy"))
    return e


async def _compare(app: TunedeckApp, pilot: Pilot, health: bool = False) -> None:
    """The Compare screen after an A/B (the recorded demo A/B in screenshots/compare-ab.json);
    ``health``: with the reasons of its client-health verdicts (and a busy machine on B)."""
    from tunedeck.ab.compare import compare as compare_sides
    from tunedeck.ab.sides import side_from_dict
    from tunedeck.ui.screens.compare import CompareScreen

    e = json.loads((REPO / "screenshots" / "compare-ab.json").read_text())
    if health:
        e = _client_health_at_peak(e)
    a, b = side_from_dict(e["a"]), side_from_dict(e["b"])
    cmp = compare_sides(a, b)
    series = e.get("series") or [[], []]
    scr = CompareScreen(
        start_campaign=_no_campaign,
        profiles=[a.profile, b.profile, "sglang-eagle3", "vllm-baseline"],
        a=a.profile,
        b=b.profile,
        comparison=cmp,
        series=(series[0], series[1]),
    )
    await app.push_screen(scr)
    await pilot.pause(0.2)
    scr._status(f"A/B {e.get('id')} {e.get('status')} on {e.get('host')}, plan {e.get('plan')}")
    await pilot.pause(0.2)


def write_ab_timelines(e: dict) -> None:
    """Timelines (made up, fixed) for the recorded A/B's peak level in the results store: A's SM clock
    drops from its third second (a finding), B runs at its power cap."""
    from tunedeck.bench.store import run_dir
    from tunedeck.util.files import atomic_write_json

    for side, throttle, base, secs, validity in (
        (
            "a",
            3,
            784.0,
            7,
            [
                {
                    "rule": "sm_clock_low",
                    "evidence": "SM clock below 90% of 1980 MHz in 4 of 6 s at work (mean 1762 MHz)",
                }
            ],
        ),
        ("b", 99, 887.0, 6, []),
    ):
        lv = next(lv for lv in e[side]["runs"][0]["levels"] if lv["concurrency"] == 16)
        d = run_dir(lv["run_id"])
        d.mkdir(parents=True, exist_ok=True)
        rows = [
            timeline_row(sec, round(base * min(1.0, (sec + 1) / 2) + (sec * 37 % 11), 1), 16, throttle_at=throttle)
            for sec in range(secs)
        ]
        for r in rows if side == "a" else ():  # A: more KV cache in use, a longer queue, less power once slowed
            r["server"]["kv"] = round(min(0.97, r["server"]["kv"] * 1.3), 3)
            r["server"]["waiting"] = r["server"]["waiting"] * 2
            if r["second"] >= throttle:
                r["gpu"]["power"] = [round(p * 0.85, 1) for p in r["gpu"]["power"]]
        (d / "timeline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        atomic_write_json(d / "summary.json", {**lv["summary"], "validity": validity})


@scene
async def compare_timeline(app: TunedeckApp, pilot: Pilot) -> None:
    """The Compare screen's timeline overlay: A's and B's peak level on one time axis."""
    from tunedeck.ab.compare import compare as compare_sides
    from tunedeck.ab.sides import side_from_dict
    from tunedeck.ui.screens.compare import CompareScreen
    from tunedeck.widgets.timeline_charts import TimelinePanel

    e = json.loads((REPO / "screenshots" / "compare-ab.json").read_text())
    write_ab_timelines(e)
    a, b = side_from_dict(e["a"]), side_from_dict(e["b"])
    series = e.get("series") or [[], []]
    scr = CompareScreen(
        start_campaign=_no_campaign,
        profiles=[a.profile, b.profile],
        a=a.profile,
        b=b.profile,
        comparison=compare_sides(a, b),
        series=(series[0], series[1]),
        sides=(a, b),
    )
    await app.push_screen(scr)
    panel = scr.query_one("#ab-timeline", TimelinePanel)
    await _until(pilot, lambda: panel.figure is not None and not panel.has_class("-empty"))
    scr._status(f"A/B {e.get('id')} {e.get('status')} on {e.get('host')}, plan {e.get('plan')}")
    await pilot.pause(0.2)  # the panel's full height is laid out
    scr.query_one("#ab-main").scroll_to_widget(panel, animate=False, top=True)
    await pilot.pause(0.2)
    panel.redraw()
    await pilot.pause(0.2)


@scene
async def runs(app: TunedeckApp, pilot: Pilot) -> None:
    from tunedeck.hostops.runstore import RunRecord
    from tunedeck.ui.screens.runs import RunsScreen

    recs = [
        RunRecord(
            f"7f3a00{i:02d}",
            TARGET,
            ["x"],
            engine=e,
            port=port,
            profile=prof,
            status=st,
            created=1_741_436_000.0 + 3600 * i,
            started=1_741_436_000.0 + 3600 * i,
            rc=rc,
            diagnosis="RuntimeError: CUDA error: an illegal memory access was encountered" if st == "failed" else None,
        )
        for i, (prof, e, port, st, rc) in enumerate(
            (
                ("sglang-base", "sglang", 30000, "stopped", 0),
                ("sglang-tuned", "sglang", 30000, "failed", 1),
                ("vllm-baseline", "vllm", 8000, "ready", None),
            )
        )
    ]
    scr = RunsScreen(records=recs)
    await app.push_screen(scr)
    await _until(pilot, lambda: scr.loads)  # the records are shown from a thread's read
    await pilot.pause(0.2)


@scene
async def deployment(app: TunedeckApp, pilot: Pilot) -> None:
    """A 2-node SGLang deployment whose worker ran out of memory: a bar per node, the verdict
    naming the node that failed first, and the merged log with a node tag on every line."""
    from tunedeck.collectors.deployment import DeploymentSnapshot
    from tunedeck.services import deploy as D
    from tunedeck.ui.screens.deployment import DeploymentScreen
    from tunedeck.widgets.deployment import MergedLog

    nodes = ["gpuop@gpu-box-01", "gpuop@gpu-box-02"]
    rec = tp_deployment(
        "d20250308a7f3",
        nodes,
        ["20250308-122905-7f3a", "20250308-122906-91c2"],
        port=30000,
        profile="r1-2n",
        rendezvous="10.0.0.11:5000",
        created=1_741_436_000.0,
    )
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    head = mid_weight_loading(rec.members[0].run_id)
    worker = StartupProgress(
        rec.members[1].run_id,
        "sglang",
        "failed",
        "weight-loading",
        fraction=0.38,
        elapsed=21.0,
        diagnosis="CUDA out of memory while loading weights",
        proof=oom,
    )
    states = (
        D.MemberState(nodes[0], 0, "head", head.run_id, "starting", serves=True, progress=head),
        D.MemberState(
            nodes[1], 1, "worker", worker.run_id, "failed", worker.diagnosis, oom, "oom", 1.0, False, False, worker
        ),
    )
    verdict = D.Verdict(
        "failed",
        f"node B ({nodes[1]}) failed first: CUDA out of memory while loading weights",
        oom,
        nodes[1],
    )
    ts = "[2025-03-08 12:29:{:02d}{}]"
    lines = (
        (nodes[0], ts.format(5, "") + " server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-R1', tp_size=16)"),
        (nodes[1], ts.format(6, " TP8") + " Init torch distributed begin."),
        (nodes[0], ts.format(7, " TP0") + " Init torch distributed ends. mem usage=0.42 GB"),
        (nodes[1], ts.format(7, " TP8") + " Init torch distributed ends. mem usage=0.42 GB"),
        (nodes[0], ts.format(8, " TP0") + " Load weight begin. avail mem=139.20 GB"),
        (nodes[1], ts.format(8, " TP8") + " Load weight begin. avail mem=4.10 GB"),
        (nodes[0], "Loading safetensors checkpoint shards:  62% Completed | 8/13 [00:15<00:09]"),
        (nodes[1], ts.format(27, " TP8") + " Scheduler hit an exception: Traceback (most recent call last):"),
        (nodes[1], oom),
    )
    snap = DeploymentSnapshot(rec.deploy_id, tuple(nodes), states, verdict, lines=lines)

    class Still:
        """One sample, then nothing new (a still frame)."""

        async def start(self) -> None:
            pass

        async def sample(self) -> DeploymentSnapshot:
            nonlocal snap
            out, snap = snap, DeploymentSnapshot(rec.deploy_id, tuple(nodes), states, verdict)
            return out

        async def stop(self, **kw: object) -> tuple[list[object], dict[str, object]]:
            return [], {}

        async def aclose(self) -> None:
            pass

    scr = DeploymentScreen(rec, collector=Still(), interval=3600.0)
    await app.push_screen(scr)
    view = scr.query_one(MergedLog)
    await _until(pilot, lambda: scr.snapshot is not None)
    view.flush_now()
    await _until(pilot, lambda: bool(app._notifications))  # the verdict's toast: not part of the frame
    app.clear_notifications()
    await pilot.pause(0.3)


@scene
async def keys(app: TunedeckApp, pilot: Pilot) -> None:
    await pilot.press("question_mark")
    await pilot.pause(0.2)


@scene
async def confirm_stop(app: TunedeckApp, pilot: Pilot) -> None:
    from tunedeck.ui.screens.modals import ConfirmModal

    await app.push_screen(
        ConfirmModal(
            "Stop run 20250308-122905-7f3a on gpuop@gpu-box-01 (pid 48213)?\nTERM, then KILL after 30 s.",
            title="Stop the server",
            action="Stop",
            danger=True,
        )
    )
    await pilot.pause(0.2)


@scene
async def hosts(app: TunedeckApp, pilot: Pilot) -> None:
    from tunedeck.ui.screens.hosts import HostsModal

    await app.push_screen(
        HostsModal(
            TARGET,
            [
                (TARGET, "current"),
                ("gpu-box-02", "used before"),
                ("h200-a", "~/.ssh/config"),
                ("local", "this machine"),
                ("demo", "the simulator"),
            ],
        )
    )
    await pilot.pause(0.2)


def fleet() -> tuple[Any, Callable[[Pilot], Awaitable[None]]]:
    """Five hosts: two busy 8-GPU boxes (the first expanded), a 4-GPU box with a server, one
    refusing the login and one unreachable (its next try an hour away, so the frame is still),
    and a 2-node deployment over the two 8-GPU boxes."""
    from tunedeck.collectors.fleet import FleetMember
    from tunedeck.collectors.sources import Sources
    from tunedeck.hostops.hosts import HostError
    from tunedeck.ui.fleet_app import FleetApp

    def member(target: str, gpu: GpuStatus, host: Any, servers: tuple = ()) -> FleetMember:
        return FleetMember(target, None, Sources(gpu=FakeGpu([gpu]), host=FakeHost(host), servers=FakeServers(servers)))

    down = GpuStatus("host-unreachable", message="connection refused")
    members = [
        member("gpu-box-01", h200_status(8, 3), host_stats(hostname="gpu-box-01"), servers_at(TICKS - 1)[:1]),
        member("gpu-box-02", h200_status(8, 7), host_stats(hostname="gpu-box-02")),
        member(
            "gpuop@gpu-box-03",
            h200_status(4, 11),
            host_stats(hostname="gpu-box-03"),
            (
                server(
                    "vllm-baseline",
                    "ready",
                    engine="vllm",
                    model="/models/Llama-3.1-8B-Instruct",
                    port=8000,
                    running=4.0,
                    waiting=0.0,
                    kv_cache_usage=0.12,
                    gen_throughput=402.5,
                    ttft_p50=0.048,
                ),
            ),
        ),
        member("gpu-box-04", down, HostError("auth-failed", "Permission denied (publickey)", target="gpu-box-04")),
        member("10.0.0.7:2222", down, HostError("unreachable", "connection refused", target="10.0.0.7:2222")),
    ]
    from tunedeck.services.deploy import DeploymentStore

    # a 2-node deployment over the first two boxes (this machine's record of it)
    DeploymentStore().save(
        tp_deployment(
            "d20250308a7f3",
            ["gpu-box-01", "gpu-box-02"],
            ["6a1f0c2e9b01", "6a1f0c2e9b02"],
            port=30000,
            profile="r1-2n",
            created=1741436945.0,
            status="ready",
        )
    )
    app = FleetApp(members, interval=0.01, backoff=lambda attempt: 3600.0, keymap={}, deployments_interval=0.05)

    async def run_before(pilot: Pilot) -> None:
        from tunedeck.widgets.fleet_table import FleetTable

        await _until(
            pilot,
            lambda: (
                sum(1 for x in app.latest.values() if x.link.ok) == 3
                and all(x.servers is not None for t, x in app.latest.items() if x.link.ok)
                and {x.link.state for x in app.latest.values()} == {"connected", "failed", "unreachable"}
                and bool(app.deployments)
            ),
        )
        app.interval = app.deployments_interval = 3600.0  # the feeds go quiet: a still frame
        from dataclasses import replace

        down = app.latest["10.0.0.7:2222"]
        down.link = replace(down.link, retry_at=None, attempt=3)  # no live countdown in a still frame
        table = app.screen.query_one(FleetTable)
        table.focus()
        await pilot.press("e")  # the first host, expanded
        await pilot.pause(0.6)

    return app, run_before


TUNE_CANDIDATES = (
    "sglang-base",
    "sglang-base+attention-backend=flashinfer",
    "sglang-base+attention-backend=fa3",
    "sglang-base+max-running-requests=32",
    "sglang-base+attention-backend=flashinfer,max-running-requests=32",
)


def tune_events() -> list:
    """A campaign over five candidates, fixed: three measured, one failed to start, one measuring."""
    from tunedeck.ab.events import ABEvent

    def ev(kind: str, side: str | None, t: float, fraction: float | None = None, **data: Any) -> ABEvent:
        return ABEvent(kind, f"{side or 'campaign'}: {kind}", side, 1, 0, 5, fraction, data, time=t)

    a, b, c, d, e = TUNE_CANDIDATES
    out = [ev("start", None, 0.0)]
    for name, t0, cap, tput in ((a, 0.0, 32, 1168.0), (b, 120.0, 48, 1613.0), (c, 240.0, 40, 1460.0)):
        out += [
            ev("launch", name, t0),
            ev("ready", name, t0 + 30, startup_s=30.0),
            ev("bench-start", name, t0 + 31, concurrency=1),
            ev("bench-done", name, t0 + 50, concurrency=1, met=True),
            ev("bench-start", name, t0 + 50, concurrency=cap),
            ev("bench-done", name, t0 + 100, concurrency=cap, met=True),
            ev("stop", name, t0 + 100),
            ev("capacity", name, t0 + 110, capacity=cap, result={"capacity": cap, "throughput_at_capacity": tput}),
        ]
    out += [ev("launch", d, 360.0), ev("failed", d, 380.0)]
    out += [ev("launch", e, 381.0), ev("ready", e, 411.0), ev("bench-start", e, 412.0, concurrency=1)]
    out += [ev("bench-done", e, 431.0, concurrency=1, met=True), ev("bench-start", e, 431.0, concurrency=64)]
    return out


@scene
async def tune(app: TunedeckApp, pilot: Pilot) -> None:
    """The Tune screen during a campaign: the form and its command, the candidates' states, the
    best so far, the ETA and the frontier."""
    from textual.widgets import Input

    from tunedeck.ab.tuneview import TuneProgress
    from tunedeck.ui.screens.tune import TuneScreen

    prog = TuneProgress(((n, 8) for n in TUNE_CANDIDATES), campaign="tune-20260101-120000-ab12", estimate_s=900.0)
    for ev in tune_events():
        prog.feed(ev)
    scr = TuneScreen(
        start_campaign=_no_campaign,
        profiles=["sglang-base", "sglang-tuned", "sglang-eagle3", "vllm-baseline"],
        base="sglang-base",
        snapshot=prog.snapshot(now=440.0),
    )
    await app.push_screen(scr)
    await pilot.pause(0.2)
    for fid, value in (
        ("tune-vary", "flags.attention-backend=flashinfer,fa3; flags.max-running-requests=32"),
        ("tune-ttft", "500"),
        ("tune-tpot", "50"),
        ("tune-budget", "2h"),
    ):
        scr.query_one(f"#{fid}", Input).value = value
    await pilot.pause(0.3)


SCENES: dict[str, Scene] = {
    "status": status,
    "profiles": profiles,
    "launch-form": launch_form,
    "run": run,
    "bench": scene(_bench),
    "bench-sweep": bench_sweep,
    "bench-timeline": scene(partial(_bench, keys=("t",))),  # its timeline alone: one time axis
    "bench-setup": bench_setup,
    "bench-setup-slo": bench_setup_slo,
    "bench-setup-workload": bench_setup_workload,
    "compare": scene(_compare),
    "compare-client-health": scene(partial(_compare, health=True)),
    "compare-timeline": compare_timeline,
    "runs": runs,
    "deployment": deployment,
    "keys": keys,
    "confirm-stop": confirm_stop,
    "hosts": hosts,
    "fleet": fleet,
    "tune": tune,
}

__all__ = ["SCENES", "Scene", "base_app", "bench_script", "bench_sweep_script", "h200_status"]
