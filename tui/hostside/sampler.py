"""The host's one sampler: everything the status screen shows, on one SSH channel.

    python3 tunedeck-host-<hash>.pyz sample --home HOME [--interval 1] [--smi nvidia-smi]

One long-lived process per host and per dashboard, started by the laptop with
``host.stream`` (:mod:`tunedeck.services.sampler`). It writes one JSON object a line
on stdout:

``hello``   ``pid``, ``python``, ``interval``: the first line
``gpu``     ``rows``: the CSV rows of one block of the ONE ``nvidia-smi --query-gpu … -lms`` stream
``apps``    ``rows``: the compute processes (a second long-lived ``--query-compute-apps -lms`` stream)
``gpu_error`` ``status`` (exit status or null), ``text``: nvidia-smi failed or went quiet; restarted
            with backoff
``host``    ``hostname``, ``cpu`` [total, idle] jiffies, ``cpus``, ``mem_total``, ``mem_used``,
            ``load`` [1, 5, 15], ``uptime`` (read from ``/proc``)
``runs``    ``kind`` (runs, bench, ab) and ``runs``: the folders under ``HOME/<kind>`` with
            pid, start time, alive, rc and meta; sent when something other than a log size changed
``bye``     ``why``: ``lifetime``: it ends as planned (``--lifetime``, default an hour); the laptop
            starts the next one at once
``server``  ``port``, ``run_id``, ``health``/``metrics``/``models``: ``{status, error, body}`` of
            ``/health``, ``/metrics`` (only the engine's own ``sglang:``/``vllm:`` lines) and,
            until a model is known, ``/v1/models``, read on the host's own loopback

In steady state it starts no process: ``/proc`` and the run folders are read
directly (:mod:`~tunedeck.hostside.hostread`), HTTP is the standard library's
(:mod:`~tunedeck.hostside.serverprobe`), and the two nvidia-smi loops are started once
(again only after one of them ends: :mod:`~tunedeck.hostside.smiloop`).

It ends when the laptop is gone (:mod:`~tunedeck.hostside.channel`): a write to stdout
fails (the SSH channel closed), its parent changed (the session ended), or one line could not be
written for ``--keepalive`` seconds (nobody reads: a dead link). A link that dies
without a FIN or RST reaching the host (a laptop that sleeps, a cable pulled on the
way) is seen by neither: with ``--heartbeat S`` the laptop writes a newline to
stdin every few seconds, and the sampler ends when stdin closes or brings nothing
for S seconds. ``--lifetime`` bounds anything else, as the per-command collector's
``timeout 3600`` did. Its nvidia-smi children end with it. Standard library only,
Python >= 3.9.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from tunedeck.hostside.channel import Heartbeat, Output
from tunedeck.hostside.hostread import list_runs, read_host
from tunedeck.hostside.serverprobe import probe_server
from tunedeck.hostside.smiloop import APPS_FIELDS, GPU_FIELDS, SmiLoop

log = logging.getLogger("tunedeck.sampler")

#: run folder kinds under ``${TUNEDECK_HOME}``
KINDS = ("runs", "bench", "ab")

#: seconds between two reads of the bench/ab job folders (the servers' run folders: every sample)
JOBS_EVERY = 5.0

# ---------------------------------------------------------------------- the sampler


class Sampler:
    def __init__(self, args: argparse.Namespace, out: Output) -> None:
        self.args = args
        self.out = out
        self.stop = threading.Event()
        self.interval = max(0.1, float(args.interval))
        self._runs_sent: Dict[str, Any] = {}
        self._runs_at: Dict[str, float] = {}
        self._scanned_at: Dict[str, float] = {}
        self._ended: Dict[str, Dict[str, Dict[str, Any]]] = {k: {} for k in KINDS}
        self._models: Dict[int, str] = {}
        self._servers: "queue.Queue[Optional[List[Dict[str, Any]]]]" = queue.Queue(maxsize=1)
        ms = str(max(100, round(self.interval * 1000)))
        fmt = "--format=csv,noheader,nounits"
        self.gpu = SmiLoop(
            [args.smi, "--query-gpu=" + ",".join(GPU_FIELDS), fmt, "-lms", ms],
            self._gpu_block,
            self._gpu_error,
            quiet=max(10.0, 5 * self.interval),
            stop=self.stop,
            name="smi-gpu",
        )
        apps_ms = str(max(1000, round(args.apps_interval * 1000)))
        self.apps = SmiLoop(
            [args.smi, "--query-compute-apps=" + ",".join(APPS_FIELDS), fmt, "-lms", apps_ms],
            self._apps_block,
            self._apps_error,
            quiet=None,
            stop=self.stop,
            name="smi-apps",
            idle_block=1.5 * max(1.0, args.apps_interval),
        )

    def _gpu_block(self, rows: List[str]) -> None:
        self.out.emit({"t": "gpu", "time": time.time(), "rows": rows})

    def _gpu_error(self, status: Optional[int], text: str) -> None:
        log.warning("nvidia-smi query: status %s: %s", status, text.splitlines()[-1:] or "")
        self.out.emit({"t": "gpu_error", "time": time.time(), "status": status, "text": text[-2000:]})

    def _apps_block(self, rows: List[str]) -> None:
        self.out.emit({"t": "apps", "time": time.time(), "rows": rows})

    def _apps_error(self, status: Optional[int], text: str) -> None:
        log.warning("nvidia-smi compute-apps: status %s: %s", status, text.splitlines()[-1:] or "")
        self.out.emit({"t": "apps_error", "time": time.time(), "status": status, "text": text[-500:]})

    # ---- runs and servers
    def _scan_runs(self, now: float) -> List[Dict[str, Any]]:
        servers: List[Dict[str, Any]] = []
        for kind in KINDS:
            if kind != "runs" and now - self._runs_at.get(kind, -1e9) < JOBS_EVERY:
                continue  # job folders pile up: read them less often than the servers
            try:
                runs = list_runs(os.path.join(self.args.home, kind), self._ended[kind])
            except OSError as e:
                log.error("listing %s/%s: %s", self.args.home, kind, e)
                continue
            key = json.dumps(
                [{k: v for k, v in r.items() if k != "log_size"} for r in runs], sort_keys=True, default=str
            )
            if key != self._runs_sent.get(kind) or now - self._runs_at.get(kind, 0.0) >= 10.0:
                self._runs_sent[kind] = key
                self._runs_at[kind] = now
                self.out.emit({"t": "runs", "kind": kind, "time": time.time(), "runs": runs})
            if kind == "runs":
                servers = [r for r in runs if r["alive"] and isinstance(r["meta"].get("port"), int)]
        return servers

    def _probe_loop(self) -> None:
        """Reads /health and /metrics of each live server (its own thread: a slow server
        never delays the GPU or host lines)."""
        timeout = self.args.probe_timeout
        while not self.stop.is_set():
            try:
                runs = self._servers.get(timeout=1.0)
            except queue.Empty:
                continue
            if runs is None:
                return
            for r in runs:
                self.out.emit(probe_server(int(r["meta"]["port"]), r["id"], timeout, self._models))

    def run(self) -> str:
        """Sample until the reader is gone or a signal arrives; returns why it stopped."""
        self.out.emit(
            {
                "t": "hello",
                "time": time.time(),
                "pid": os.getpid(),
                "interval": self.interval,
                "python": "%d.%d.%d" % sys.version_info[:3],
                "home": self.args.home,
            }
        )
        parent = os.getppid()
        started = time.monotonic()
        beat = Heartbeat(sys.stdin.fileno(), self.args.heartbeat) if self.args.heartbeat else None
        if not self.args.no_gpu:
            self.gpu.start()
            self.apps.start()
        prober = threading.Thread(target=self._probe_loop, name="probe", daemon=True)
        prober.start()
        why = ""
        next_tick = time.monotonic()
        while True:
            if self.out.gone.is_set():
                why = self.out.reason
                break
            if self.out.stalled():
                why = f"no line could be written for {self.args.keepalive:g} s"
                break
            lost = beat.lost() if beat is not None else ""
            if lost:
                why = lost
                break
            if os.getppid() != parent:
                why = "the SSH session ended (parent process gone)"
                break
            if self.stop.is_set():
                why = "stopped by a signal"
                break
            now = time.monotonic()
            if now - started >= self.args.lifetime:
                # planned: the laptop starts the next one at once; bounds a sampler orphaned by a
                # link that died without a word (no FIN or RST reached this host)
                why = f"lifetime of {self.args.lifetime:g} s reached"
                self.out.emit({"t": "bye", "time": time.time(), "why": "lifetime"})
                self.out.drain(5.0)
                break
            if now >= next_tick:
                next_tick = now + self.interval
                try:
                    host = read_host()
                    host.update({"t": "host", "time": time.time()})
                    self.out.emit(host)
                except (OSError, ValueError, IndexError) as e:
                    log.error("reading /proc: %s", e)
                    self.out.emit({"t": "host_error", "time": time.time(), "error": f"cannot read /proc: {e}"})
                servers = self._scan_runs(now)
                try:
                    self._servers.put_nowait(servers)
                except queue.Full:
                    pass  # the prober is still on the previous round: skip this one
            self.stop.wait(min(0.5, max(0.01, next_tick - time.monotonic())))
        self.stop.set()
        self.gpu.close()
        self.apps.close()
        return why


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="tunedeck-host sample", description="stream the host's status as JSON lines")
    p.add_argument("--home", required=True, help="${TUNEDECK_HOME} on this host")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--apps-interval", type=float, default=5.0, help="seconds between compute-process lists")
    p.add_argument("--smi", default="nvidia-smi", help="the nvidia-smi executable")
    p.add_argument("--no-gpu", action="store_true", help="do not run nvidia-smi")
    p.add_argument("--probe-timeout", type=float, default=2.0)
    p.add_argument(
        "--keepalive", type=float, default=45.0, help="end when a line could not be written for this many seconds"
    )
    p.add_argument(
        "--heartbeat",
        type=float,
        default=None,
        metavar="S",
        help="end when stdin closes or brings nothing for S seconds (the laptop writes to it)",
    )
    p.add_argument(
        "--lifetime",
        type=float,
        default=3600.0,
        help="end (with a 'bye' line) after this many seconds; the laptop starts the next",
    )
    args = p.parse_args(argv)
    if min(args.interval, args.keepalive, args.apps_interval, args.lifetime) <= 0:
        p.error("--interval, --apps-interval, --keepalive and --lifetime must be positive")
    if args.heartbeat is not None and not args.heartbeat > 0:
        p.error("--heartbeat must be positive")
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a closed channel is an EPIPE on write
    out = Output(sys.stdout.fileno(), args.keepalive)
    sampler = Sampler(args, out)

    def on_signal(_signum: int, _frame: Any) -> None:
        sampler.stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    why = sampler.run()
    log.info("sampler %d ends: %s", os.getpid(), why)
    out.close()
    return 0
