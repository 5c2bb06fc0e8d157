"""`tunedeck report --html` opened in headless Chromium: no console error, no network request,
and the charts are on the screenshot; for a real benchmark result and for a real A/B
(`tunedeck ab` on the demo host's simulator, its report made from the journal's record).

Chromium is Debian's package (``/usr/bin/chromium``; `.ci/run` installs it). The test drives it
over the DevTools protocol on ``--remote-debugging-pipe`` (NUL-separated JSON on fds 3 and 4:
standard library only), records every console message, exception, log entry and network
request of the page, and decodes the screenshot (PNG) with ``zlib``.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import struct
import subprocess
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.integration.test_ab_demo import profiles  # noqa: F401  (the A/B's profiles fixture)
from tests.simfix import SimProc, free_port
from tests.waits import scaled, until
from tunedeck.report.svg import COLORS

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-debugging-pipe",
)
pytestmark = pytest.mark.timeout(300)


def chromium() -> str:
    if CHROMIUM.is_file():
        return str(CHROMIUM)
    if os.environ.get("CI") == "true":
        pytest.fail(f"{CHROMIUM} is missing (`.ci/run` installs Debian's chromium package)")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")


class DevTools:
    """Chromium with the DevTools protocol on a pipe: ``call`` waits for the answer, events pile up."""

    def __init__(self, exe: str, profile_dir: Path) -> None:
        cmd_r, cmd_w = os.pipe()
        resp_r, resp_w = os.pipe()
        # fds 3 and 4 in the child, from numbers that cannot collide with them (bash: dash takes 0-9 only)
        hi_r, hi_w = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(resp_w, fcntl.F_DUPFD, 10)
        os.close(cmd_r)
        os.close(resp_w)
        profile_dir.mkdir(parents=True, exist_ok=True)
        self.log = profile_dir / "chromium.log"
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                ["bash", "-c", f'exec 3<&{hi_r} 4>&{hi_w} {hi_r}<&- {hi_w}>&-; exec "$@"', "bash", exe, *FLAGS]
                + [f"--user-data-dir={profile_dir / 'profile'}", "about:blank"],
                pass_fds=(hi_r, hi_w),
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                start_new_session=True,
            )
        os.close(hi_r)
        os.close(hi_w)
        self.cmd_w, self.resp_r = cmd_w, resp_r
        self.events: list[dict[str, Any]] = []
        self.answers: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self.next_id = 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = os.read(self.resp_r, 1 << 20)
            if not chunk:
                return
            buf += chunk
            *msgs, buf = buf.split(b"\0")
            for m in msgs:
                obj = json.loads(m)
                if "id" in obj:
                    self.answers.put(obj)
                else:
                    self.events.append(obj)

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        ans = until(lambda: self._answer() or self.proc.poll() is not None, 30, what=f"the answer to {method}")
        if ans is True:
            raise AssertionError(f"{method}: chromium exited; its log:\n{self.log.read_text()[-2000:]}")
        assert "error" not in ans, (method, ans["error"])
        return dict(ans.get("result") or {})

    def _answer(self) -> dict[str, Any] | None:
        while True:
            try:
                ans = self.answers.get_nowait()
            except queue.Empty:
                return None
            if ans["id"] == self.next_id:
                return ans

    def close(self) -> None:
        try:
            os.write(self.cmd_w, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
            self.proc.wait(scaled(10))
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        os.close(self.cmd_w)
        self.reader.join(5)
        os.close(self.resp_r)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, hdr = 8, b"", b""
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            hdr = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", hdr)
    assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
    bpp = 4 if ctype == 6 else 3
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, [bytes(r) for r in rows]


def color_count(rows: list[bytes], bpp: int, rgb: tuple[int, int, int], tol: int = 40) -> int:
    n = 0
    for r in rows:
        for i in range(0, len(r), bpp):
            if abs(r[i] - rgb[0]) + abs(r[i + 1] - rgb[1]) + abs(r[i + 2] - rgb[2]) <= tol:
                n += 1
    return n


def _rgb(hex_color: str) -> tuple[int, int, int]:
    return int(hex_color[1:3], 16), int(hex_color[3:5], 16), int(hex_color[5:7], 16)


def open_report(dt: DevTools, page: Path) -> dict[str, Any]:
    """Open ``page`` in a new tab; what the page did and what its first chart looks like."""
    target = dt.call("Target.createTarget", url="about:blank")["targetId"]
    session = dt.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        dt.call(f"{domain}.enable", session)
    dt.call("Emulation.setDeviceMetricsOverride", session, width=1000, height=1400, deviceScaleFactor=1, mobile=False)
    start = len(dt.events)
    url = page.resolve().as_uri()
    dt.call("Page.navigate", session, url=url)
    until(lambda: any(e.get("method") == "Page.loadEventFired" for e in dt.events[start:]), 30, what="the page's load")

    def js(expr: str) -> Any:
        r = dt.call("Runtime.evaluate", session, expression=expr, returnByValue=True)
        return r["result"].get("value")

    charts = js("document.querySelectorAll('svg.chart').length")
    rect = js("(r => [r.x, r.y, r.width, r.height])(document.querySelector('svg.chart').getBoundingClientRect())")
    shot = dt.call(
        "Page.captureScreenshot",
        session,
        format="png",
        captureBeyondViewport=True,
        clip={"x": rect[0], "y": rect[1], "width": rect[2], "height": rect[3], "scale": 1},
    )
    page_shot = dt.call("Page.captureScreenshot", session, format="png")
    dt.call("Emulation.setDeviceMetricsOverride", session, width=390, height=800, deviceScaleFactor=1, mobile=True)
    phone_width = js("document.documentElement.scrollWidth")
    mine = [e for e in dt.events[start:] if e.get("sessionId") == session]
    return {
        "url": url,
        "charts": charts,
        "chart_png": base64.b64decode(shot["data"]),
        "page_png": base64.b64decode(page_shot["data"]),
        "phone_width": phone_width,
        "errors": [
            e
            for e in mine
            if (e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert", "warning"))
            or e["method"] == "Runtime.exceptionThrown"
            or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] in ("error", "warning"))
        ],
        "requests": [e["params"]["request"]["url"] for e in mine if e["method"] == "Network.requestWillBeSent"],
    }


def check(result: dict[str, Any], series_colors: int) -> None:
    assert result["errors"] == [], result["errors"]
    assert result["requests"] == [result["url"]], result["requests"]  # the page itself, nothing else
    assert result["charts"] >= 3
    assert result["phone_width"] <= 390, "the page scrolls sideways at a phone's width"
    w, h, rows = png_pixels(result["page_png"])
    bpp = len(rows[0]) // w
    white = color_count(rows, bpp, (255, 255, 255), tol=6)
    assert white < 0.97 * w * h, "the screenshot is blank"
    w, h, rows = png_pixels(result["chart_png"])
    assert w > 300 and h > 100, (w, h)
    for color in COLORS[:series_colors]:
        assert color_count(rows, len(rows[0]) // w, _rgb(color)) > 300, f"no {color} series on the first chart"


def run_bench(port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*tunedeck_cmd(), "bench", "--demo", "--port", str(port), "--concurrency", "1,4"]
        + ["--num-prompts", "8", "--input-len", "8", "--output-len", "24", "--warmup", "0", "--ready-timeout", "30"]
        + ["--json", "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


#: two short levels, as the benchmark's (a few seconds per side on the simulator)
PLAN = """name = "browser"
description = "two short levels for the report's charts"
endpoint = "completions"
input_len = 8
output_len = 24
ignore_eos = true
warmup = 0

[[level]]
concurrency = 1
num_prompts = 4

[[level]]
concurrency = 4
num_prompts = 8
"""


def run_ab(a: str, b: str, plan: Path) -> subprocess.CompletedProcess[str]:
    """A real A/B on the demo host: both sides launched on the simulator, benchmarked and stopped."""
    plan.write_text(PLAN)
    return subprocess.run(
        [*tunedeck_cmd(), "ab", a, b, "--demo", "--plan", str(plan), "--yes", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=scaled(120),
    )


def test_html_reports_open_in_chromium_without_errors_or_network(tmp_path: Path, profiles: dict[str, str]):
    exe = chromium()
    # a benchmark on the demo host against a simulator on four of its simulated GPUs
    port = free_port()
    args = ["--port", str(port), "--sim-load-seconds", "1", "--sim-fixed-ttft-ms", "60"]
    sim = SimProc("vllm", "m", "-tp", "4", *args, "--sim-fixed-itl-ms", "20", env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    try:
        bench = run_bench(port)
        out, err = bench.communicate(timeout=scaled(90))
    finally:
        sim.stop()
    assert bench.returncode == 0, err[-3000:]
    got = json.loads(out)
    single = (got if isinstance(got, list) else [got])[-1]["run_id"]
    ab = run_ab(profiles["sglang-base"], profiles["sglang-tuned"], tmp_path / "browser.toml")
    assert ab.returncode == 0, ab.stderr[-3000:]
    ab_id = json.loads(ab.stdout)["id"]
    pages = {}
    for ref, name in ((single, "result.html"), (ab_id, "ab.html")):
        r = subprocess.run(
            [*tunedeck_cmd(), "report", ref, "--html", str(tmp_path / name), "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=scaled(60),
        )
        assert r.returncode == 0, r.stderr
        pages[name] = tmp_path / name
    html = pages["result.html"].read_text()
    # the host-side run's timeline drawn, its validity checked
    validity = html.split("<h2>Validity</h2>")[1].split("</section>")[0]
    assert "(timeline.jsonl)" in html and "C=4: " in validity and "not checked" not in validity
    # the A/B's page: its id, both profiles, the verdict on each level the plan ran
    html = pages["ab.html"].read_text()
    assert f"A/B {ab_id}: {profiles['sglang-base']} vs {profiles['sglang-tuned']}" in html
    assert "<h2>Verdict</h2>" in html and "C=1" in html and "C=4" in html
    dt = DevTools(exe, tmp_path / "chromium")
    try:
        check(open_report(dt, pages["result.html"]), series_colors=1)
        check(open_report(dt, pages["ab.html"]), series_colors=2)  # A and B both on the first chart
    finally:
        dt.close()
