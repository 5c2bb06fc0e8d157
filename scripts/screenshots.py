#!/usr/bin/env python3
"""Write the README screenshots (SVG) from the app running on deterministic fake data.

    python scripts/screenshots.py [--out screenshots/]

No terminal needed: each screen runs under ``App.run_test(size=(120, 36))``
and is saved with ``App.save_screenshot``. Add a screen by adding a
function to ``SHOTS``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
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


SHOTS: dict[str, Callable[[Path], Awaitable[Path]]] = {"status": status}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "screenshots")
    ap.add_argument("only", nargs="*", metavar="NAME", help=f"which screenshots: {', '.join(SHOTS)} (default: all)")
    args = ap.parse_args()
    unknown = [n for n in args.only if n not in SHOTS]
    if unknown:
        ap.error(f"unknown screenshot {unknown[0]!r}; known: {', '.join(SHOTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only or SHOTS:
        path = asyncio.run(SHOTS[name](args.out))
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
