"""Client capacity and precision: does the benchmark client limit or blur a measurement?

Against a fixed-timing server that stamps every token with the time it wrote
it (``tw``, perf_counter = CLOCK_MONOTONIC, shared by processes on Linux) and
the time it parsed the request (``tr``), measure for each client at
C = 1, 128, 256 with a 10 ms inter-token delay:

* client CPU per token (µs) during the timed phase (``getrusage`` of the client process),
* TTFT error: mean measured TTFT − mean true TTFT (``tw`` of the first token − ``tr``),
* mean ITL error: mean measured gap − mean gap between the server's writes,
* timestamp lag: client receive time − ``tw``, mean and p99 over every token,

and at zero delay (tokens written back to back) the most tokens per second
per client core. Each client runs in its own process; the server runs in
its own process(es). Clients compared in the same run:

* ``tunedeck``: tunedeck's client (its own stdlib HTTP/1.1 client, uvloop, timestamp-first),
* ``aiohttp``: a plain aiohttp client on uvloop iterating lines (like vLLM's benchmark client),
* ``httpx-plain``: plain httpx ``aiter_lines`` on the default asyncio loop (the naive baseline).

Usage::

    python benchmarks/client_capacity.py [--conc 1,128,256] [--itl-ms 10] [--repeats 3] [--json OUT]

Until the simulator's ``--sim-fixed-ttft-ms/--sim-fixed-itl-ms`` mode lands,
the server is ``tests/fakesrv.py`` (same idea: fixed timing, recorded writes).
The figures depend on the machine; on a shared box run it more than once and
read the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_pc = time.perf_counter
CLIENTS = ("tunedeck", "aiohttp", "httpx-plain")
EXTRA_CLIENTS = ("tunedeck-defaultgc",)  # tunedeck without quiet_gc() (what the GC tuning buys)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


SERVER_PID = 0
GC_TUNE = False
#: time.time() - perf_counter(), so the parent can compare with the simulator's wall-clock records
WALL_OFFSET = time.time() - _pc()


def server_cpu() -> float:
    """CPU seconds used so far by the server's processes (the parent and its forks)."""
    if not SERVER_PID:
        return 0.0
    import psutil

    total = 0.0
    try:
        procs = [psutil.Process(SERVER_PID)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        return 0.0
    for pr in procs:
        try:
            t = pr.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


MODEL = "fake-model"


def _body(i: int, out_len: int) -> dict[str, Any]:
    return {
        "model": MODEL,
        "prompt": f"p {i} a b c d",
        "max_tokens": out_len,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "temperature": 0.0,
    }


# ---------------------------------------------------------------- child: one client, one process


async def _child_tunedeck(url: str, conc: int, n: int, out_len: int) -> dict[str, Any]:
    from contextlib import nullcontext

    from tunedeck.bench.client import EndpointConfig, RequestSpec, make_client, prepare, quiet_gc, stream_request

    async with make_client() as c:
        ep = EndpointConfig(url, MODEL)

        def make(k: int) -> list[tuple[Any, Any]]:
            # built before the timed phase, as the runner does
            specs = [RequestSpec(f"p {i} a b c d", 6, out_len, i) for i in range(k)]
            return [(s, prepare(c, ep, s)) for s in specs]

        async def run(items: list[tuple[Any, Any]], keep: bool) -> list[dict[str, Any]]:
            it = iter(items)
            out: list[dict[str, Any]] = []

            async def lane() -> None:
                for s, req in it:
                    out.append(await stream_request(c, ep, s, request=req, keep_events=keep))

            await asyncio.gather(*(lane() for _ in range(conc)))
            return out

        await run(make(conc), False)  # warmup: open the connections
        items = make(n)
        with quiet_gc() if GC_TUNE else nullcontext():  # as the runner does for its timed phase
            cpu0, s0, t0 = _cpu(), server_cpu(), _pc()
            res = await run(items, True)
            cpu, wall, scpu = _cpu() - cpu0, _pc() - t0, server_cpu() - s0
    reqs = []
    for r in res:
        lines = [(t, b) for t, b in r.pop("_events", [])]
        reqs.append({**_lines_to_req({"start": r["start_time"], "lines": lines}), "ok": r["success"]})
    return {"cpu": cpu, "wall": wall, "server_cpu": scpu, "wall_offset": WALL_OFFSET, "requests": reqs}


async def _child_aiohttp(url: str, conc: int, n: int, out_len: int) -> dict[str, Any]:
    import aiohttp

    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:

        async def one(i: int, keep: bool) -> dict[str, Any]:
            lines = []
            st = _pc()
            async with session.post(url + "/v1/completions", json=_body(i, out_len)) as resp:
                async for raw in resp.content:
                    t = _pc()
                    raw = raw.strip()
                    if raw:
                        lines.append((t, raw))
            return {"start": st, "lines": lines if keep else []}

        async def run(k: int, keep: bool) -> list[dict[str, Any]]:
            it = iter(range(k))
            out: list[dict[str, Any]] = []

            async def lane() -> None:
                for i in it:
                    out.append(await one(i, keep))

            await asyncio.gather(*(lane() for _ in range(conc)))
            return out

        await run(conc, False)
        cpu0, s0, t0 = _cpu(), server_cpu(), _pc()
        res = await run(n, True)
        cpu, wall, scpu = _cpu() - cpu0, _pc() - t0, server_cpu() - s0
    return {
        "cpu": cpu,
        "wall": wall,
        "server_cpu": scpu,
        "wall_offset": WALL_OFFSET,
        "requests": [_lines_to_req(r) for r in res],
    }


async def _child_httpx_plain(url: str, conc: int, n: int, out_len: int) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(600.0)) as c:

        async def one(i: int, keep: bool) -> dict[str, Any]:
            lines = []
            st = _pc()
            async with c.stream("POST", url + "/v1/completions", json=_body(i, out_len)) as resp:
                async for line in resp.aiter_lines():
                    t = _pc()
                    if line:
                        lines.append((t, line.encode()))
            return {"start": st, "lines": lines if keep else []}

        async def run(k: int, keep: bool) -> list[dict[str, Any]]:
            it = iter(range(k))
            out: list[dict[str, Any]] = []

            async def lane() -> None:
                for i in it:
                    out.append(await one(i, keep))

            await asyncio.gather(*(lane() for _ in range(conc)))
            return out

        await run(conc, False)
        cpu0, s0, t0 = _cpu(), server_cpu(), _pc()
        res = await run(n, True)
        cpu, wall, scpu = _cpu() - cpu0, _pc() - t0, server_cpu() - s0
    return {
        "cpu": cpu,
        "wall": wall,
        "server_cpu": scpu,
        "wall_offset": WALL_OFFSET,
        "requests": [_lines_to_req(r) for r in res],
    }


def _lines_to_req(r: dict[str, Any]) -> dict[str, Any]:
    """Output events as (client perf_counter, server write time or None, server parse time or None)."""
    evs = []
    rid = None
    for t, raw in r["lines"]:
        if raw.startswith(b"data: {"):
            j = json.loads(raw[6:])
            if j.get("choices"):
                rid = rid or j.get("id")
                evs.append((t, j.get("tw"), j.get("tr")))
    return {"start": r["start"], "ok": bool(evs), "events": evs, "id": rid}


def child_main(a: argparse.Namespace) -> int:
    global SERVER_PID, MODEL, GC_TUNE
    GC_TUNE = a.child != "tunedeck-defaultgc"
    SERVER_PID = a.server_pid or 0
    MODEL = a.model
    if a.child == "aiohttp":
        import uvloop

        res = uvloop.run(_child_aiohttp(a.url, a.c, a.n, a.out_len))
    elif a.child == "httpx-plain":
        res = asyncio.run(_child_httpx_plain(a.url, a.c, a.n, a.out_len))
    else:
        import tunedeck.bench  # noqa: F401 - masks httpx's CLI import
        from tunedeck.util.aio import run_async

        res = run_async(_child_tunedeck(a.url, a.c, a.n, a.out_len))
    Path(a.out).write_text(json.dumps(res))
    return 0


# ---------------------------------------------------------------- parent


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def analyse(res: dict[str, Any], records: dict[str, Any] | None = None) -> dict[str, float]:
    """``records``: the simulator's --sim-record-timestamps lines by request id (wall clock)."""
    tokens = sum(len(r["events"]) for r in res["requests"])
    ttft_meas, ttft_true, itl_meas, itl_true, lag = [], [], [], [], []
    off = res.get("wall_offset", 0.0)
    for r in res["requests"]:
        ev = r["events"]
        if not ev:
            continue
        if records is not None:
            rec = records.get(r.get("id"))
            if rec is None or len(rec["times"]) != len(ev):
                continue
            ev = [(t + off, w, rec["arrival"]) for (t, _, _), w in zip(ev, rec["times"])]
            start = r["start"] + off
        else:
            start = r["start"]
        ttft_meas.append(ev[0][0] - start)
        ttft_true.append(ev[0][1] - ev[0][2])
        for (t1, w1, _), (t2, w2, _) in zip(ev, ev[1:]):
            itl_meas.append(t2 - t1)
            itl_true.append(w2 - w1)
        lag.extend(t - w for t, w, _ in ev)
    mean = statistics.fmean
    return {
        "tokens": tokens,
        "failed": sum(1 for r in res["requests"] if not r["ok"]),
        "wall_s": res["wall"],
        "cpu_s": res["cpu"],
        "tok_s": tokens / res["wall"] if res["wall"] else 0.0,
        "tok_s_per_core": tokens / res["cpu"] if res["cpu"] else 0.0,
        "cpu_us_per_token": res["cpu"] / tokens * 1e6 if tokens else float("nan"),
        "cpu_cores": res["cpu"] / res["wall"] if res["wall"] else 0.0,
        "server_cores": res.get("server_cpu", 0.0) / res["wall"] if res["wall"] else 0.0,
        "ttft_ms": mean(ttft_meas) * 1000 if ttft_meas else float("nan"),
        "ttft_true_ms": mean(ttft_true) * 1000 if ttft_true else float("nan"),
        "ttft_err_ms": (mean(ttft_meas) - mean(ttft_true)) * 1000 if ttft_meas else float("nan"),
        "itl_err_ms": (mean(itl_meas) - mean(itl_true)) * 1000 if itl_meas else float("nan"),
        "lag_mean_ms": mean(lag) * 1000 if lag else float("nan"),
        "lag_p99_ms": _pct(lag, 99) * 1000 if lag else float("nan"),
    }


class Server:
    def __init__(self, *args: str) -> None:
        self.p = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "fakesrv.py"), *args],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        line = self.p.stdout.readline()  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def close(self) -> None:
        import signal

        try:
            os.killpg(self.p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.p.wait(10)


class SimServer:
    """``tunedeck sim vllm`` with fixed timing; token write times come from --sim-record-timestamps."""

    def __init__(self, ttft_ms: float, itl_ms: float) -> None:
        import socket
        import tempfile
        import urllib.request

        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        self.rec = Path(tempfile.mkdtemp()) / "times.jsonl"
        self.p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tunedeck",
                "sim",
                "vllm",
                "m",
                "-tp",
                "8",
                "--port",
                str(port),
                "--sim-load-seconds",
                "0.5",
                "--sim-fixed-ttft-ms",
                str(ttft_ms),
                "--sim-fixed-itl-ms",
                str(itl_ms),
                "--sim-record-timestamps",
                str(self.rec),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            start_new_session=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
        self.url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > end or self.p.poll() is not None:
                self.close()
                raise RuntimeError("simulator did not become ready")
            time.sleep(0.2)

    def records(self) -> dict[str, Any]:
        out = {}
        for line in self.rec.read_text().splitlines():
            try:
                j = json.loads(line)
            except ValueError:
                continue
            out[j["id"]] = j
        return out

    close = Server.close


def run_client(kind: str, srv: Any, c: int, n: int, out_len: int) -> dict[str, float]:
    url = srv.url
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    import tempfile

    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    r = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            kind,
            "--url",
            url,
            "--c",
            str(c),
            "--n",
            str(n),
            "--out",
            out,
            "--out-len",
            str(out_len),
            "--server-pid",
            str(srv.p.pid),
            "--model",
            "m" if isinstance(srv, SimServer) else "fake-model",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if r.returncode != 0:
        raise RuntimeError(f"{kind} client failed: {r.stderr[-2000:]}")
    try:
        res = json.loads(Path(out).read_text())
    finally:
        os.unlink(out)
    if isinstance(srv, SimServer):
        time.sleep(0.2)  # let the simulator flush its records
        return analyse(res, srv.records())
    return analyse(res)


def _median_runs(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", choices=CLIENTS + EXTRA_CLIENTS, help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--c", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--model", default="fake-model", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--conc", default="1,128,256")
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--out-len", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2, help="requests per lane in the timed phase")
    ap.add_argument("--min-requests", type=int, default=8, help="at least this many timed requests per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--server-procs", type=int, default=1)
    ap.add_argument(
        "--server",
        choices=("fakesrv", "sim"),
        default="fakesrv",
        help="fixed-timing server: tests/fakesrv.py (stamps tokens in the payload) or `tunedeck sim`",
    )
    ap.add_argument("--zero-delay", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--zero-conc", type=int, default=32)
    ap.add_argument("--zero-out-len", type=int, default=4000)
    ap.add_argument("--json", default=None, metavar="OUT")
    a = ap.parse_args(argv)
    if a.child:
        return child_main(a)
    clients = [c for c in a.clients.split(",") if c]
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load": os.getloadavg()}, "timed": [], "zero": []}
    if a.server == "sim":
        srv: Any = SimServer(a.ttft_ms, a.itl_ms)
    else:
        srv = Server("--ttft-ms", str(a.ttft_ms), "--itl-ms", str(a.itl_ms), "--procs", str(a.server_procs))
    try:
        print(
            f"server: {a.server}; fixed timing: TTFT {a.ttft_ms:g} ms, {a.itl_ms:g} ms between tokens, {a.out_len} tokens/request, "
            f"median of {a.repeats} interleaved runs; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
        )
        hdr = "{:>4} {:<13} {:>9} {:>8} {:>9} {:>10} {:>10} {:>10} {:>9} {:>9}"
        print(
            hdr.format(
                "C", "client", "tok/s", "cores", "µs/token", "TTFT err", "ITL err", "lag mean", "lag p99", "srv cores"
            )
        )
        for c in [int(x) for x in a.conc.split(",")]:
            runs: dict[str, list[dict[str, float]]] = {k: [] for k in clients}
            for _ in range(a.repeats):  # interleaved, so load changes hit every client alike
                for kind in clients:
                    runs[kind].append(run_client(kind, srv, c, max(c * a.rounds, a.min_requests), a.out_len))
            for kind in clients:
                m = _median_runs(runs[kind])
                results["timed"].append({"c": c, "client": kind, **m, "runs": runs[kind]})
                print(
                    hdr.format(
                        c,
                        kind,
                        f"{m['tok_s']:.0f}",
                        f"{m['cpu_cores']:.2f}",
                        f"{m['cpu_us_per_token']:.1f}",
                        f"{m['ttft_err_ms']:+.2f}ms",
                        f"{m['itl_err_ms']:+.3f}ms",
                        f"{m['lag_mean_ms']:.2f}ms",
                        f"{m['lag_p99_ms']:.2f}ms",
                        f"{m['server_cores']:.2f}",
                    ),
                    flush=True,
                )
    finally:
        srv.close()
    if a.zero_delay:
        srv = Server("--ttft-ms", "0", "--itl-ms", "0", "--procs", str(a.server_procs), "--burst", "64")
        try:
            print(f"\nzero delay: C={a.zero_conc}, {a.zero_out_len} tokens/request, tokens written back to back")
            print(
                "{:<13} {:>10} {:>14} {:>9} {:>9}".format("client", "tok/s", "tok/s per core", "µs/token", "srv cores")
            )
            zruns: dict[str, list[dict[str, float]]] = {k: [] for k in clients}
            for _ in range(a.repeats):
                for kind in clients:
                    zruns[kind].append(run_client(kind, srv, a.zero_conc, a.zero_conc, a.zero_out_len))
            for kind in clients:
                m = _median_runs(zruns[kind])
                results["zero"].append({"client": kind, **m, "runs": zruns[kind]})
                print(
                    "{:<13} {:>10.0f} {:>14.0f} {:>9.2f} {:>9.2f}".format(
                        kind, m["tok_s"], m["tok_s_per_core"], m["cpu_us_per_token"], m["server_cores"]
                    ),
                    flush=True,
                )
        finally:
            srv.close()
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
