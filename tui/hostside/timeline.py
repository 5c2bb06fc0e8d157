"""A benchmark's timeline: the GPUs and the server, second by second, next to the client.

While a host-side benchmark level runs, :class:`Timeline` writes one line a second
to ``timeline.jsonl`` in the level's result folder::

    {"second": 3, "t": 4.001, "wall": …,
     "client": {"tok_s", "in_flight", "completed", "failed"},
     "gpu": {"util": [..], "mem_used": [..], "sm_clock": [..], "power": [..], "power_limit": [..],
             "temp": [..]},
     "server": {"running", "waiting", "kv", "preemptions", "gen_tok_s"}}

GPU figures come from one ``nvidia-smi --query-gpu … -lms 1000`` process for the whole
job; server figures from the server's ``/metrics`` on the host's loopback (the
engine's own names: ``../shared/docs/serving-engines.md``). A value the driver or
server does not give is ``null``. ``preemptions`` counts since the level started
(vLLM's ``num_preemptions_total`` delta; SGLang's ``num_retracted_reqs``, the most seen).
Standard library only, Python >= 3.9; the file is written by a thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from tunedeck.bench.counters import iter_series
from tunedeck.fmt import text_table
from tunedeck.hostside.jobfiles import EventLog
from tunedeck.util.aio import wait_while, within

log = logging.getLogger(__name__)

TIMELINE = "timeline.jsonl"

#: the columns asked of nvidia-smi (the sampler's, in the same order)
GPU_FIELDS = (
    "index",
    "utilization.gpu",
    "memory.used",
    "clocks.sm",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "clocks.max.sm",
)
_KEYS = ("util", "mem_used", "sm_clock", "power", "power_limit", "temp", "sm_clock_max")


def _num(cell: str) -> Optional[float]:
    try:
        v = float(cell.strip())
    except ValueError:
        return None  # [N/A], [Not Supported], …
    return v if v == v else None


def parse_gpu_rows(rows: List[str]) -> Dict[str, List[Optional[float]]]:
    """Rows of ``--query-gpu=GPU_FIELDS`` (noheader, nounits) -> one list per figure, by index."""
    cells = sorted((r.split(",") for r in rows if r.split(",")[0].strip().isdigit()), key=lambda c: int(c[0]))
    out: Dict[str, List[Optional[float]]] = {k: [] for k in _KEYS}
    for c in cells:
        for i, k in enumerate(_KEYS, start=1):
            out[k].append(_num(c[i]) if i < len(c) else None)
    return out


def parse_metrics(text: str) -> Dict[str, List[float]]:
    """Prometheus text -> the values of each series name (labels dropped); enough for gauges
    and counters summed or averaged over their label sets."""
    out: Dict[str, List[float]] = {}
    for name, _labels, v in iter_series(text):
        out.setdefault(name, []).append(v)
    return out


def server_figures(text: str, prev: Optional[Dict[str, Any]], now: float) -> Dict[str, Any]:
    """The timeline's server figures from one ``/metrics`` page (``prev``: the previous raw counters)."""
    m = parse_metrics(text)

    def total(name: str) -> Optional[float]:
        return sum(m[name]) if name in m else None

    def mean(name: str) -> Optional[float]:
        return sum(m[name]) / len(m[name]) if name in m else None

    eng = "vllm" if any(k.startswith("vllm:") for k in m) else "sglang"
    if eng == "sglang":
        gen_total = total("sglang:generation_tokens_total")
        fig: Dict[str, Any] = {
            "running": total("sglang:num_running_reqs"),
            "waiting": total("sglang:num_queue_reqs"),
            "kv": mean("sglang:token_usage"),
            "gen_tok_s": total("sglang:gen_throughput"),
            "preempt_raw": total("sglang:num_retracted_reqs"),
        }
    else:
        gen_total = total("vllm:generation_tokens_total")
        kv = mean("vllm:kv_cache_usage_perc")
        fig = {
            "running": total("vllm:num_requests_running"),
            "waiting": total("vllm:num_requests_waiting"),
            "kv": kv if kv is not None else mean("vllm:gpu_cache_usage_perc"),
            "gen_tok_s": None,
            "preempt_raw": total("vllm:num_preemptions_total"),
        }
        if prev and gen_total is not None and prev.get("gen_total") is not None and now > prev["t"]:
            d = gen_total - prev["gen_total"]
            fig["gen_tok_s"] = d / (now - prev["t"]) if d >= 0 else None
    fig.update(engine=eng, gen_total=gen_total, t=now)
    return fig


class Timeline:
    """Samples GPUs and the server once a second and writes a line per client tick."""

    def __init__(self, url: str, *, smi: str = "nvidia-smi", interval: float = 1.0) -> None:
        self.url = url.rstrip("/")
        self.smi = smi
        self.interval = interval
        self.gpu: Dict[str, List[Optional[float]]] = {}
        self.server: Dict[str, Any] = {}
        self._raw: Optional[Dict[str, Any]] = None
        self._base_preempt: Optional[float] = None
        self._log: Optional[EventLog] = None
        self._level: Optional[int] = None
        self._tasks: List["asyncio.Task[None]"] = []
        self._proc: Optional[asyncio.subprocess.Process] = None
        self._first_block = asyncio.Event()
        self._stopping = False
        self._new_block = asyncio.Event()
        self._run_dir: Optional[Path] = None
        self.level_lines: List[Dict[str, Any]] = []
        #: what was on the GPUs before the job's first request (:meth:`check_start`)
        self.start_info: Dict[str, Any] = {}
        #: run id -> the level's validity findings
        self.validity: Dict[str, List[Dict[str, str]]] = {}
        self._run_id: Optional[str] = None
        self.lines = 0

    async def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._gpu_loop()), asyncio.ensure_future(self._server_loop())]

    async def _gpu_loop(self) -> None:
        ms = str(max(100, int(self.interval * 1000)))
        try:
            self._proc = await asyncio.create_subprocess_exec(
                self.smi,
                "--query-gpu=" + ",".join(GPU_FIELDS),
                "--format=csv,noheader,nounits",
                "-lms",
                ms,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError as e:
            log.warning("timeline: no GPU figures (%s: %s)", self.smi, e.strerror or e)
            self._first_block.set()  # nothing to wait for
            return
        assert self._proc.stdout is not None
        block: List[str] = []
        while not self._stopping:
            try:
                raw = await within(self._proc.stdout.readline(), 0.2 if block else None)
            except asyncio.TimeoutError:
                self.gpu, block = parse_gpu_rows(block), []
                self._first_block.set()
                self._new_block.set()
                continue
            if not raw:
                if block:
                    self.gpu = parse_gpu_rows(block)
                self._first_block.set()
                log.warning("timeline: nvidia-smi ended (status %s); no more GPU figures", await self._proc.wait())
                return
            block.append(raw.decode("utf-8", "replace").strip())

    async def _server_loop(self) -> None:
        from tunedeck.util.http import HttpError, request

        failed = False
        while not self._stopping:
            t0 = time.monotonic()
            try:
                r = await request("GET", self.url + "/metrics", timeout=max(0.5, self.interval))
                if r.status == 200:
                    fig = server_figures(r.text, self._raw, time.monotonic())
                    self._raw = fig
                    self.server = fig
                    failed = False
                elif not failed:
                    failed = True
                    log.warning("timeline: %s/metrics answered HTTP %s; no server figures", self.url, r.status)
            except HttpError as e:
                if not failed:
                    failed = True
                    log.warning("timeline: %s", e)
                self.server = {}
            await asyncio.sleep(max(0.05, self.interval - (time.monotonic() - t0)))

    def on_event(self, ev: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """Take one bench event; returns the timeline line a tick wrote (None for other events)."""
        kind = ev.get("type")
        if kind == "level_start" and ev.get("run_dir"):
            self._close_level()
            try:
                self._log = EventLog(Path(str(ev["run_dir"])) / TIMELINE)
            except OSError as e:
                log.error("timeline: cannot open %s: %s", ev["run_dir"], e)
                return None
            self._level = ev.get("level")
            self._run_dir = Path(str(ev["run_dir"]))
            self._run_id = str(ev.get("run_id") or "")
            self.level_lines = []
            self._base_preempt = self.server.get("preempt_raw")
        elif kind == "tick" and self._log is not None and ev.get("level") == self._level:
            line = self._line(ev)
            self._log.write(line)
            self.level_lines.append(line)
            self.lines += 1
            return line
        elif kind == "level_done" and ev.get("level") == self._level:
            self._close_level()
            if isinstance(ev.get("summary"), dict):
                self._add_validity(ev["summary"])
        return None

    @property
    def run_id(self) -> Optional[str]:
        """The run id of the level being recorded (None between levels)."""
        return self._run_id if self._log is not None else None

    def _add_validity(self, summary: Dict[str, Any]) -> None:
        """The level's validity findings, into its summary (the event's and summary.json)."""
        from tunedeck.hostside.validity import findings
        from tunedeck.util.files import atomic_write_json

        found = findings(self.level_lines, summary, self.start_info)
        summary["validity"] = found
        if self._run_id:
            self.validity[self._run_id] = found
        for f in found:
            log.warning("level %s: %s: %s", self._level, f["rule"], f["evidence"])
        path = self._run_dir / "summary.json" if self._run_dir is not None else None
        if path is None or not path.is_file():
            return
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            stored["validity"] = found
            atomic_write_json(path, stored)
        except (OSError, ValueError) as e:
            log.error("validity: cannot update %s: %s", path, e)

    async def check_start(self, *, wait: float = 5.0, settle: float = 5.0) -> Dict[str, Any]:
        """Before the first request: the GPUs' utilization and the compute processes that are not
        the server's (by session: the server is the process listening on the URL's port).

        A reading still busy with the previous level's last requests (utilization is an average
        over the last sample period) is read again, for up to ``settle`` seconds: GPUs busy
        with something else stay busy."""
        from tunedeck.hostside.validity import BUSY_UTIL

        # the compute processes are listed while the first reading comes (each is an nvidia-smi
        # start: side by side, the level's first request waits for one of them, not both)
        listing = asyncio.ensure_future(_compute_apps(self.smi))
        try:
            try:
                await asyncio.wait_for(self._first_block.wait(), wait)
            except asyncio.TimeoutError:
                log.warning("validity: no GPU reading within %g s of the start; GPU checks skipped", wait)
            await wait_while(
                lambda: any(isinstance(u, float) and u >= BUSY_UTIL for u in self.gpu.get("util", [])),
                self._new_block,
                settle,
            )
            apps = await listing
        finally:
            listing.cancel()  # cancelled with the level: its nvidia-smi is killed (below)
        info: Dict[str, Any] = {"gpu": dict(self.gpu)}
        if apps is None:
            info["others_unknown"] = "the compute processes could not be listed"
        else:
            from urllib.parse import urlsplit

            parts = urlsplit(self.url)
            sid = None
            if parts.hostname in ("127.0.0.1", "localhost", "::1") and parts.port:
                pid = listener_pid(parts.port)
                sid = session_of(pid) if pid is not None else None
            if sid is None:
                info["others_unknown"] = "the server's process was not found on this host"
            else:
                info["others"] = [a for a in apps if session_of(a["pid"]) != sid]
        self.start_info = info
        return info

    def _line(self, ev: Dict[str, Any]) -> Dict[str, Any]:
        srv = self.server
        pre = srv.get("preempt_raw")
        if pre is not None and srv.get("engine") == "vllm":
            base = self._base_preempt if self._base_preempt is not None else pre
            if self._base_preempt is None:
                self._base_preempt = pre
            pre = max(0.0, pre - base)
        return {
            "second": ev.get("second"),
            "t": ev.get("t"),
            "wall": round(time.time(), 3),
            "client": {k: ev.get(k) for k in ("tok_s", "in_flight", "completed", "failed")},
            "gpu": dict(self.gpu),
            "server": {
                "running": srv.get("running"),
                "waiting": srv.get("waiting"),
                "kv": srv.get("kv"),
                "preemptions": pre,
                "gen_tok_s": srv.get("gen_tok_s"),
            },
        }

    def _close_level(self) -> None:
        lg, self._log = self._log, None
        if lg is not None:
            try:
                lg.close()
            except OSError as e:
                log.error("timeline: writing %s failed: %s", lg.path, e)

    async def stop(self) -> None:
        """End the loops and the nvidia-smi process. The loops also stop on a flag: on Python < 3.12
        ``asyncio.wait_for`` can swallow a cancellation, which would leave a loop running."""
        self._close_level()
        self._stopping = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.terminate()  # its readline sees the end at once
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            _done, pending = await asyncio.wait(self._tasks, timeout=5)
            for t in pending:
                log.error("timeline: a sampling loop did not stop within 5 s (%s)", t.get_coro())
        if proc is not None and proc.returncode is None:
            try:
                await asyncio.wait_for(proc.wait(), 3)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()


async def _compute_apps(smi: str) -> Optional[List[Dict[str, Any]]]:
    """One ``--query-compute-apps`` listing: [{pid, gpu_uuid, used_mib, name}], None when it failed."""
    try:
        proc = await asyncio.create_subprocess_exec(
            smi,
            "--query-compute-apps=pid,gpu_uuid,used_memory,process_name",
            "--format=csv,noheader,nounits",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError as e:
        log.warning("validity: %s: %s", smi, e.strerror or e)
        return None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 15)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        log.warning("validity: %s --query-compute-apps did not answer in 15 s", smi)
        return None
    except asyncio.CancelledError:
        if proc.returncode is None:
            proc.kill()
        raise
    if proc.returncode != 0:
        log.warning("validity: %s --query-compute-apps exited %s", smi, proc.returncode)
        return None
    apps = []
    for line in out.decode("utf-8", "replace").splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 4 and cells[0].isdigit():
            apps.append(
                {"pid": int(cells[0]), "gpu_uuid": cells[1], "used_mib": _num(cells[2]), "name": ",".join(cells[3:])}
            )
    return apps


def session_of(pid: int) -> Optional[int]:
    """The session id of ``pid`` (None when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[3])
    except (OSError, IndexError, ValueError):
        return None


def listener_pid(port: int) -> Optional[int]:
    """The process listening on TCP ``port`` (from /proc/net/tcp{,6} and the processes' fds)."""
    import os

    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f, None)
                for line in f:
                    c = line.split()
                    if len(c) > 9 and c[3] == "0A" and int(c[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(c[9])
        except OSError:
            continue
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") in wanted:
                    return int(entry)
            except OSError:
                continue
    return None


def read_timeline(run_dir: Path) -> List[Dict[str, Any]]:
    """The lines of ``run_dir/timeline.jsonl`` (a torn last line is skipped)."""
    out = []
    try:
        text = (run_dir / TIMELINE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _mean(xs: Any) -> Optional[float]:
    vals = [x for x in (xs or []) if isinstance(x, (int, float))]
    return sum(vals) / len(vals) if vals else None


def _cell(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def format_timeline(lines: List[Dict[str, Any]]) -> str:
    """The timeline as a table: one row a second, GPU figures averaged over the GPUs."""
    head = (
        "s",
        "client tok/s",
        "engine tok/s",
        "running",
        "waiting",
        "KV %",
        "preempt",
        "GPU util %",
        "SM MHz",
        "power W",
        "cap W",
        "temp C",
    )
    rows = []
    for ln in lines:
        c, g, v = ln.get("client") or {}, ln.get("gpu") or {}, ln.get("server") or {}
        kv = v.get("kv")
        temps = [x for x in (g.get("temp") or []) if isinstance(x, (int, float))]
        rows.append(
            (
                str(ln.get("second")),
                _cell(c.get("tok_s"), ".0f"),
                _cell(v.get("gen_tok_s"), ".0f"),
                _cell(v.get("running"), ".0f"),
                _cell(v.get("waiting"), ".0f"),
                _cell(None if kv is None else 100 * kv, ".1f"),
                _cell(v.get("preemptions"), ".0f"),
                _cell(_mean(g.get("util")), ".0f"),
                _cell(_mean(g.get("sm_clock")), ".0f"),
                _cell(_mean(g.get("power")), ".0f"),
                _cell(_mean(g.get("power_limit")), ".0f"),
                _cell(max(temps) if temps else None, ".0f"),
            )
        )
    return "\n".join(text_table(head, rows, right=range(len(head))))
