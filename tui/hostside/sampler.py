"""The host's one sampler: everything the status screen shows, on one SSH channel.

    python3 tunedeck-host-<hash>.pyz sample --home HOME [--interval 1] [--smi nvidia-smi]

One long-lived process per host and per dashboard, started by the laptop with
``host.stream`` (:mod:`tui.services.sampler`). It writes one JSON object a line
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
directly, HTTP is the standard library's, and the two nvidia-smi loops are
started once (again only after one of them ends).

It ends when the laptop is gone: a write to stdout fails (the SSH channel
closed), its parent changed (the session ended), or one line could not be
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
import http.client
import json
import logging
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from tui.util.retry import Backoff

log = logging.getLogger("tunedeck.sampler")

#: same fields, same order as ``tui.collectors.smi.QUERY_GPU_FIELDS`` (tests check it)
GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks.mem",
)
#: same as ``tui.collectors.smi.QUERY_APPS_FIELDS``
APPS_FIELDS = ("pid", "gpu_uuid", "used_memory", "process_name")

#: run folder kinds under ``${TUNEDECK_HOME}``
KINDS = ("runs", "bench", "ab")

#: /metrics lines kept (the rest of an engine's exposition is dropped on the host)
METRIC_PREFIXES = ("sglang:", "vllm:")

#: seconds between two reads of the bench/ab job folders (the servers' run folders: every sample)
JOBS_EVERY = 5.0

#: a line of rows from nvidia-smi within this many seconds of the previous one is the same block
BLOCK_GAP = 0.2


class Output:
    """Writes JSON lines to a file descriptor from a thread; notices a reader that went away.

    ``os.write`` to a closed pipe raises (SIGPIPE is ignored): :attr:`gone` is set.
    A write still pending after ``keepalive`` seconds also counts as gone (the
    channel is full and nobody drains it).
    """

    def __init__(self, fd: int, keepalive: float) -> None:
        self.fd = fd
        self.keepalive = keepalive
        self.gone = threading.Event()
        self.reason = ""
        self._q: "queue.Queue[Optional[bytes]]" = queue.Queue(maxsize=256)
        self._writing_since = 0.0
        self._thread = threading.Thread(target=self._loop, name="out", daemon=True)
        self._thread.start()

    def emit(self, obj: Dict[str, Any]) -> None:
        if self.gone.is_set():
            return
        line = (json.dumps(obj, separators=(",", ":"), default=str) + "\n").encode("utf-8")
        try:
            self._q.put_nowait(line)
        except queue.Full:
            self._lose(f"{self._q.maxsize} lines waiting: nobody reads the channel")

    def stalled(self) -> bool:
        since = self._writing_since
        return since > 0 and time.monotonic() - since > self.keepalive

    def _lose(self, why: str) -> None:
        if not self.gone.is_set():
            self.reason = why
            self.gone.set()

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            self._writing_since = time.monotonic()
            try:
                view = memoryview(item)
                while view:
                    n = os.write(self.fd, view)
                    view = view[n:]
            except OSError as e:
                self._lose(f"stdout closed ({e.strerror or e})")
                return
            finally:
                self._writing_since = 0.0
                self._q.task_done()

    def drain(self, timeout: float) -> None:
        """Wait until every queued line was written (or the reader is gone), at most ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while (
            (self._q.unfinished_tasks or self._writing_since) and not self.gone.is_set() and time.monotonic() < deadline
        ):
            time.sleep(0.02)

    def close(self) -> None:
        try:
            self._q.put_nowait(None)
        except queue.Full:
            pass


class Heartbeat:
    """Reads the laptop's heartbeat (any bytes) from a file descriptor in a thread.

    :meth:`lost` says why the laptop counts as gone: stdin closed, or nothing came
    for ``timeout`` seconds (a link that died without a word)."""

    def __init__(self, fd: int, timeout: float) -> None:
        self.fd = fd
        self.timeout = timeout
        self.last = time.monotonic()
        self.closed = ""
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 4096)
            except OSError as e:
                self.closed = f"stdin unreadable ({e.strerror or e})"
                return
            if not data:
                self.closed = "stdin closed (the laptop ended the channel)"
                return
            self.last = time.monotonic()

    def lost(self) -> str:
        if self.closed:
            return self.closed
        quiet = time.monotonic() - self.last
        if quiet > self.timeout:
            return f"no heartbeat from the laptop for {quiet:.0f} s (limit {self.timeout:g} s)"
        return ""


# ---------------------------------------------------------------------- /proc


def read_host(proc: str = "/proc") -> Dict[str, Any]:
    """CPU jiffies, memory, load and uptime from ``/proc`` (no process started)."""
    out: Dict[str, Any] = {"hostname": socket.gethostname()}
    cpus = 0
    with open(f"{proc}/stat", encoding="ascii", errors="replace") as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            parts = line.split()
            if parts[0] == "cpu":
                vals = [int(v) for v in parts[1:] if v.isdigit()]
                out["cpu"] = [sum(vals[:8]), sum(vals[3:5])]
            elif parts[0][3:].isdigit():
                cpus += 1
    out["cpus"] = cpus or None
    mem: Dict[str, int] = {}
    with open(f"{proc}/meminfo", encoding="ascii", errors="replace") as f:
        for line in f:
            key, _, rest = line.partition(":")
            fields = rest.split()
            if fields and fields[0].isdigit():
                mem[key.strip()] = int(fields[0]) * 1024
    if "MemTotal" in mem:
        avail = mem.get("MemAvailable")
        if avail is None and "MemFree" in mem:
            avail = mem["MemFree"] + mem.get("Buffers", 0) + mem.get("Cached", 0)
        out["mem_total"] = mem["MemTotal"]
        out["mem_used"] = mem["MemTotal"] - avail if avail is not None else None
    with open(f"{proc}/loadavg", encoding="ascii") as f:
        out["load"] = [float(x) for x in f.read().split()[:3]]
    with open(f"{proc}/uptime", encoding="ascii") as f:
        out["uptime"] = float(f.read().split()[0])
    return out


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def proc_starttime(pid: int) -> Optional[str]:
    """Field 22 of ``/proc/PID/stat`` (None when gone, a zombie or dead)."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    rest = text.rsplit(")", 1)[-1].split()
    if len(rest) < 20 or rest[0] in ("Z", "X"):
        return None
    return rest[19]


def list_runs(base: str, cache: Optional[Dict[str, Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """The run folders under ``base`` like ``tui.hostops.hostruns.list_host_runs`` sees them.

    ``cache``: entries of runs that ended (an ``rc`` and no live process) are kept there and not
    read again, so a folder full of old runs costs one ``listdir`` a sample."""
    try:
        names = sorted(os.listdir(base))
    except FileNotFoundError:
        return []
    out = []
    for rid in names:
        if cache is not None and rid in cache:
            out.append(cache[rid])
            continue
        d = os.path.join(base, rid)
        if not os.path.isfile(os.path.join(d, "run.sh")):
            continue
        pid_text = (_read(os.path.join(d, "pid")) or "").strip()
        st = (_read(os.path.join(d, "starttime")) or "").strip()
        rc_text = (_read(os.path.join(d, "rc")) or "").strip()
        pid = int(pid_text) if pid_text.isdigit() else None
        alive = bool(pid and st and proc_starttime(pid) == st)
        try:
            size = os.path.getsize(os.path.join(d, "log"))
        except OSError:
            size = 0
        meta: Any = {}
        raw = _read(os.path.join(d, "meta.json"))
        if raw:
            try:
                meta = json.loads(raw)
            except ValueError:
                meta = {}
        entry = {
            "id": rid,
            "pid": pid,
            "starttime": st or None,
            "alive": alive,
            "rc": int(rc_text) if rc_text.lstrip("-").isdigit() else None,
            "log_size": size,
            "dir": d,
            "meta": meta if isinstance(meta, dict) else {},
        }
        out.append(entry)
        if cache is not None and not alive and entry["rc"] is not None:
            cache[rid] = entry
    if cache is not None:
        for gone in set(cache) - set(names):
            del cache[gone]
    return out


# ---------------------------------------------------------------------- HTTP


def http_get(port: int, path: str, timeout: float) -> Dict[str, Any]:
    """``GET http://127.0.0.1:PORT/PATH``: ``{status, error, body}`` (``error`` refused/timeout/text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Accept": "*/*"})
        r = conn.getresponse()
        body = r.read(8 * 1024 * 1024).decode("utf-8", "replace")
        return {"status": r.status, "error": "", "body": body}
    except ConnectionRefusedError:
        return {"status": None, "error": "refused", "body": "connection refused"}
    except socket.timeout:
        return {"status": None, "error": "timeout", "body": ""}
    except (OSError, http.client.HTTPException) as e:
        return {"status": None, "error": f"{type(e).__name__}: {e}"[:200], "body": ""}
    finally:
        conn.close()


def filter_metrics(text: str) -> str:
    """Only the engine's own series (and their HELP/TYPE lines): a fraction of the exposition."""
    keep = []
    for line in text.splitlines():
        name = line[7:] if line.startswith(("# HELP ", "# TYPE ")) else line
        if name.startswith(METRIC_PREFIXES):
            keep.append(line)
    return "\n".join(keep) + ("\n" if keep else "")


# ---------------------------------------------------------------------- nvidia-smi


class SmiLoop:
    """One long-lived ``nvidia-smi … -lms`` process, restarted with backoff when it ends.

    ``on_block(rows)`` gets each block of rows (a burst of lines), ``on_error(status, text)``
    each failure. ``quiet`` seconds without any row count as a failure (the process is
    ended and started again)."""

    def __init__(
        self,
        argv: List[str],
        on_block: Callable[[List[str]], None],
        on_error: Callable[[Optional[int], str], None],
        *,
        quiet: Optional[float],
        stop: threading.Event,
        name: str,
        idle_block: Optional[float] = None,
    ) -> None:
        self.argv = argv
        self.idle_block = idle_block
        self.on_block = on_block
        self.on_error = on_error
        self.quiet = quiet
        self.stop = stop
        self.proc: "Optional[subprocess.Popen[bytes]]" = None
        self.starts = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        backoff = Backoff(1.0, 30.0)
        while not self.stop.is_set():
            ok = self._once()
            if self.stop.is_set():
                return
            if ok:
                backoff.reset()
            self.stop.wait(backoff.next())

    def _once(self) -> bool:
        if shutil.which(self.argv[0]) is None:  # not even a fork while it is missing
            self.on_error(None, f"{self.argv[0]}: not found (No such file or directory)")
            return False
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, close_fds=True
            )
        except OSError as e:
            self.on_error(None, f"{self.argv[0]}: {e.strerror or e}")
            return False
        self.starts += 1
        proc = self.proc
        stdout = proc.stdout
        assert stdout is not None
        lines: "queue.Queue[Optional[bytes]]" = queue.Queue()

        def pump() -> None:
            for raw in iter(stdout.readline, b""):
                lines.put(raw)
            lines.put(None)

        reader = threading.Thread(target=pump, name="smi-read", daemon=True)
        reader.start()
        block: List[str] = []
        noise: List[str] = []
        got = False
        last_row = last_block = time.monotonic()
        ended = False
        while not self.stop.is_set():
            try:
                raw = lines.get(timeout=BLOCK_GAP if block else 1.0)
            except queue.Empty:
                if block:
                    self.on_block(block)
                    block, got, last_block = [], True, time.monotonic()
                elif self.idle_block is not None and time.monotonic() - last_block > self.idle_block:
                    self.on_block([])  # a loop that lists nothing prints nothing: say so
                    last_block = time.monotonic()
                elif self.quiet is not None and time.monotonic() - last_row > self.quiet:
                    self.on_error(None, "\n".join(noise[-6:]) or f"no output from nvidia-smi for {self.quiet:g} s")
                    break
                continue
            if raw is None:
                ended = True
                break
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.split(",", 1)[0].strip().isdigit():
                block.append(line)
                last_row = time.monotonic()
            elif line.strip():
                noise = (noise + [line.strip()])[-6:]
        if block:
            self.on_block(block)
            got = True
        self._end(proc)
        if ended and not self.stop.is_set():
            self.on_error(proc.returncode, "\n".join(noise).strip())
        return got

    @staticmethod
    def _end(proc: "subprocess.Popen[bytes]") -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def close(self) -> None:
        """End the nvidia-smi process now and reap it (the caller set ``stop`` first)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


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
                port = int(r["meta"]["port"])
                health = http_get(port, "/health", timeout)
                msg: Dict[str, Any] = {
                    "t": "server",
                    "time": time.time(),
                    "port": port,
                    "run_id": r["id"],
                    "health": {"status": health["status"], "error": health["error"], "body": health["body"][:300]},
                }
                if health["error"] != "refused":
                    metrics = http_get(port, "/metrics", timeout)
                    if metrics["status"] == 200:
                        metrics["body"] = filter_metrics(metrics["body"])
                    else:
                        metrics["body"] = metrics["body"][:300]
                    msg["metrics"] = metrics
                    if health["status"] == 200 and port not in self._models:
                        models = http_get(port, "/v1/models", timeout)
                        try:
                            data = json.loads(models["body"]).get("data") or []
                            model = str(data[0]["id"]) if data and isinstance(data[0], dict) else ""
                        except (ValueError, AttributeError, KeyError):
                            model = ""
                        if model:
                            self._models[port] = model
                if port in self._models:
                    msg["model"] = self._models[port]
                self.out.emit(msg)

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
