#!/usr/bin/env python3
"""Write the README screenshots (SVG) from the app running on deterministic fake data.

    python scripts/screenshots.py [--out screenshots/]

No terminal needed: each screen runs under ``App.run_test(size=(120, 36))``
and is saved with ``App.save_screenshot``. Add a screen by adding a
function to ``SHOTS``. Every screen is fed fixed data (fake collectors,
scripted progress lines, a recorded log), nothing is launched, and the
profile / results / state folders point at empty temporary directories,
so reruns write the same bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Awaitable, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.ui_fakes import FakeGpu, FakeHost, FakeServers, gpu_status, host_stats, server  # noqa: E402
from tui.app import TunedeckApp, make_app  # noqa: E402
from tui.model import NA  # noqa: E402

SIZE = (120, 36)


async def _wait(pilot, pred, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise SystemExit("screenshots: the app did not reach the expected state")
        await pilot.pause(0.05)


async def status(out: Path) -> Path:
    """The status screen: 8 GPUs with 30 s of history, a ready and a starting server."""
    ticks = 30
    gpu = FakeGpu([gpu_status(8, t) for t in range(ticks)], interval=0.01)
    servers = FakeServers((
        server("sglang-tuned", "ready"),
        server("vllm-baseline", "starting", engine="vllm", model="/models/Llama-3.1-70B-Instruct", port=8000,
               running=NA, waiting=NA, kv_cache_usage=NA, gen_throughput=NA, ttft_p50=NA),
    ))
    app: TunedeckApp = make_app(gpu=gpu, host_source=FakeHost(host_stats()), servers=servers,
                                target="gpuop@gpu-box-01", interval=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await _wait(pilot, lambda: app.latest.gpu.time == 1_700_000_000.0 + ticks - 1
                    and app.latest.servers is not None and app.latest.link.ok)
        await pilot.pause(0.3)
        path = app.save_screenshot(filename="status.svg", path=str(out))
    return Path(path)


def _fake_app() -> TunedeckApp:
    gpu = FakeGpu([gpu_status(8, t) for t in range(5)], interval=0.01)
    servers = FakeServers((server("sglang-tuned", "ready", port=30000),
                           server("vllm-baseline", "ready", engine="vllm", port=8000,
                                  model="/models/Llama-3.1-70B-Instruct", url="http://127.0.0.1:8000")))
    return make_app(gpu=gpu, host_source=FakeHost(host_stats()), servers=servers, target="gpuop@gpu-box-01",
                    interval=0.05)


class _Target:
    """Stands for the host on screens that only need one to offer their keys (nothing runs)."""

    target = "gpuop@gpu-box-01"


async def profiles(out: Path) -> Path:
    """The profile list: built-ins, A/B marked, the command preview and a pre-flight report."""
    from tui.profiles.preflight import Finding
    from tui.screens.profiles import ProfilesScreen

    app = _fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await _wait(pilot, lambda: isinstance(app.screen, ProfilesScreen))
        scr = app.screen
        scr.host = _Target()
        names = list(scr.profiles)
        scr.table.move_cursor(row=names.index("sglang-base"))
        await pilot.press("1")
        scr.table.move_cursor(row=names.index("sglang-tuned"))
        await pilot.press("2")
        report = SimpleNamespace(profile="sglang-tuned", findings=(
            Finding("info", "gpus", "8 × NVIDIA H200 (SM90)"),
            Finding("info", "version", "sglang 0.5.2 (read from host); 25 backends from help"),
            Finding("warning", "backend-arch-unverified",
                    "'flashinfer' passes argument checks on SM90 for MLA models but is unverified there; "
                    "verify on the host", "attention_backend"),
        ))
        scr.reports["sglang-tuned"] = report
        scr._show_report(report)
        scr.refresh_bindings()
        await pilot.pause(0.3)
        path = app.save_screenshot(filename="profiles.svg", path=str(out))
    return Path(path)


async def launch_form(out: Path) -> Path:
    """The launch form on top of the list, editing sglang-tuned."""
    from tui.profiles.store import ProfileStore
    from tui.screens.launch import LaunchScreen
    from tui.screens.profiles import ProfilesScreen

    app = _fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await _wait(pilot, lambda: isinstance(app.screen, ProfilesScreen))
        await app.push_screen(LaunchScreen(ProfileStore().get("sglang-tuned")))
        await _wait(pilot, lambda: isinstance(app.screen, LaunchScreen))
        await pilot.pause(0.5)
        path = app.save_screenshot(filename="launch-form.svg", path=str(out))
    return Path(path)


async def run(out: Path) -> Path:
    """The run view mid-load: a recorded SGLang startup (8 of 14 weight shards) and its progress."""
    from textual.app import App

    from tui.model import StartupProgress
    from tui.screens.run import RunScreen
    from tui.services.launcher import RunRecord
    from widgets.server_log import ServerLog
    from widgets.startup_progress import StartupProgressView

    log = Path("/work/shared/data/real-logs/sglang-start-1.log")
    if not log.is_file():
        log = REPO / "tests" / "data" / "sglang-start-1.log"
    lines = log.read_text(errors="replace").splitlines()
    cut = next(i for i, ln in enumerate(lines) if "| 8/14" in ln) + 1

    class ShotRun(RunScreen):
        def _start_following(self) -> None:  # nothing to follow: the log is fed below
            pass

    rec = RunRecord(run_id="20250308-122905-7f3a", target="gpuop@gpu-box-01",
                    argv=["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-32B-Instruct",
                          "--tp-size", "4", "--port", "30000", "--enable-metrics"],
                    engine="sglang", port=30000, profile="sglang-tuned", pid=48213, status="starting")
    scr = ShotRun(_Target(), rec)  # type: ignore[arg-type]

    class ShotApp(App):
        def on_mount(self) -> None:
            self.push_screen(scr)

    app = ShotApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        view = scr.query_one(ServerLog)
        view.append_lines(lines[:cut])
        view.flush_now()
        scr.query_one(StartupProgressView).update(StartupProgress(
            run_id=rec.run_id, engine="sglang", state="starting", phase="weight-loading",
            phase_label="safetensors shards", phase_progress=8 / 14, phase_n=8, phase_total=14, fraction=0.41,
            elapsed=23.0, eta=34.0, eta_source="history", health="down",
            gpu_memory=(9120.0, 9120.0, 9118.0, 9118.0), time=1_741_436_958.0))
        await pilot.pause(0.4)
        path = app.save_screenshot(filename="run.svg", path=str(out))
    return Path(path)


def _bench_script() -> list[dict]:
    """Progress lines of a 2-level sweep (C=1 done, C=16 running), as ``tunedeck bench --progress`` prints."""
    msgs: list[dict] = [{"type": "start", "levels": [{"concurrency": 1, "request_rate": "inf"},
                                                    {"concurrency": 16, "request_rate": "inf"}]}]
    for level, conc, secs, base in ((0, 1, 10, 88.0), (1, 16, 9, 1190.0)):
        msgs.append({"type": "level_start", "level": level, "concurrency": conc, "request_rate": "inf",
                     "run_id": f"20250308-1240{level}0-c{conc}"})
        total = 10 if conc == 1 else 80
        for sec in range(secs):
            ramp = min(1.0, (sec + 1) / 3)
            tok = round(base * ramp + (sec * 37 % 11) * (conc / 4), 1)
            done = min(total, (sec + 1) * (1 if conc == 1 else 7))
            msgs.append({"type": "tick", "level": level, "second": sec, "t": sec + 1.0, "tok_s": tok,
                         "completed": done, "total": total, "failed": 0, "in_flight": 0 if done >= total else conc,
                         "cpu": [0.21 + 0.01 * (sec % 3)], "ttft_p50_ms": 41.0 + 6 * level,
                         "ttft_p99_ms": 58.0 + 40 * level, "itl_p50_ms": 11.2 + 2.5 * level,
                         "itl_p99_ms": 14.9 + 4 * level})
        if level == 0:
            msgs.append({"type": "level_done", "level": 0, "summary": {
                "completed": 10, "failed": 0, "duration": 10.2, "output_throughput": 86.4,
                "per_user_output_throughput": 86.4, "max_concurrency": 1, "median_ttft_ms": 41.3,
                "p99_ttft_ms": 57.8, "median_itl_ms": 11.2, "p99_itl_ms": 14.8}})
    return msgs


async def bench(out: Path) -> Path:
    """The live benchmark view: a 1,16 sweep, level 2 running, with its tok/s chart."""
    from textual.app import App

    from tui.screens.bench import BenchScreen

    class ShotBench(BenchScreen):
        def run_bench(self) -> None:  # type: ignore[override]  # scripted, nothing runs
            for m in _bench_script():
                self.post_message(self.Progress(m))

    scr = ShotBench(["--host", "gpuop@gpu-box-01", "--port", "30000", "--concurrency", "1,16"])

    class ShotApp(App):
        def on_mount(self) -> None:
            self.push_screen(scr)

    app = ShotApp()
    async with app.run_test(size=SIZE) as pilot:
        await _wait(pilot, lambda: len(scr._level_info) == 2 and scr.last_tick.get("second") == 8)
        await pilot.pause(1.5)  # the charts redraw at most once a second
        path = app.save_screenshot(filename="bench.svg", path=str(out))
    return Path(path)


async def compare(out: Path) -> Path:
    """The Compare screen after an A/B (scripts/screenshot_compare.py, recorded data)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("screenshot_compare", REPO / "scripts" / "screenshot_compare.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return await mod.shoot(out / "compare.svg")


SHOTS: dict[str, Callable[[Path], Awaitable[Path]]] = {
    "status": status, "profiles": profiles, "launch-form": launch_form, "run": run, "bench": bench,
    "compare": compare,
}


def _isolate() -> None:
    """Empty profile / results / state folders: only built-ins and the scripted data show."""
    import atexit
    import shutil

    tmp = Path(tempfile.mkdtemp(prefix="tunedeck-shots-"))
    atexit.register(shutil.rmtree, tmp, True)
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "TUNEDECK_HOME", "TUNEDECK_SIM_STATE"):
        os.environ[var] = str(tmp / var.lower())
    os.environ["TUNEDECK_PROFILES"] = str(tmp / "profiles")
    os.environ.pop("TUNEDECK_CONFIG", None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "screenshots")
    ap.add_argument("only", nargs="*", metavar="NAME", help=f"which screenshots: {', '.join(SHOTS)} (default: all)")
    args = ap.parse_args()
    unknown = [n for n in args.only if n not in SHOTS]
    if unknown:
        ap.error(f"unknown screenshot {unknown[0]!r}; known: {', '.join(SHOTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    _isolate()
    for name in args.only or SHOTS:
        path = asyncio.run(SHOTS[name](args.out))
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
