"""Detached server launch, run discovery, log follow and stop (docs/reliability.md section 2).

Everything runs through :class:`tui.services.hosts.Host` primitives (``run_script``,
``run``, ``stream``), so a LocalHost, the demo host and an SSH host behave alike.

On the host each run has a folder ``${TUNEDECK_HOME:-$HOME/.tunedeck}/runs/<run_id>/``::

    run.sh      the wrapper (written through a quoted heredoc with a random delimiter); it holds
                no command: it sources ``cmd.env`` (0600, the exact ``env … argv``) and deletes
                it before the server starts, so no file there keeps a secret
    pid         the wrapper's pid = the process group / session id
    starttime   field 22 of /proc/<pid>/stat (PID-reuse guard)
    argv.json   the argv, secret flag values redacted;  env.json  the extra environment (secrets redacted)
    meta.json   engine, port, profile, creation time
    log         stdout+stderr of the server
    rc          exit status, written by the wrapper when the server ends

Locally each run has a record ``state_dir()/runs/<run_id>.json`` (:class:`RunRecord`),
written *before* the launch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import shlex
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import AsyncGenerator, Callable, Mapping, Sequence

from tui.services.hosts import ByteStream, Host, HostError, RunResult, get_host
from tui.util.files import atomic_write_json
from tui.util.paths import state_dir
from tui.util.safety import (
    REDACTED,
    UnsafeInput,
    check_argv,
    check_env,
    check_text,
    redact_argv,
    redact_env,
    visible,
)

_log = logging.getLogger(__name__)

RUN_ID_RE = re.compile(r"^[0-9a-f]{6,32}$")
ENGINES = ("sglang", "vllm", "other")

#: statuses of a run record
LAUNCHING, STARTING, READY, FAILED, EXITED, STOPPING, STOPPED, STALE, UNKNOWN = (
    "launching",
    "starting",
    "ready",
    "failed",
    "exited",
    "stopping",
    "stopped",
    "stale",
    "unknown",
)
ENDED = frozenset({FAILED, EXITED, STOPPED, STALE})


class LaunchRefused(Exception):
    """A launch was refused before anything ran (a run is alive, the GPUs are busy, bad input)."""


def new_run_id() -> str:
    """A local hex id that sorts by creation time: 8 hex digits of seconds + 4 random."""
    return f"{int(time.time()):08x}{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise UnsafeInput(f"run id {run_id!r}: expected 6-32 lowercase hex digits")
    return run_id


def target_name(host: Host) -> str:
    return getattr(host, "target", "local") or "local"


# ============================================================================ local records


@dataclass
class RunRecord:
    """The local record of a run (JSON in ``state_dir()/runs/<run_id>.json``)."""

    run_id: str
    target: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # redacted
    engine: str = "other"
    port: int | None = None
    profile: str | None = None
    run_dir: str | None = None  # on the host, known after the launch script ran
    status: str = LAUNCHING
    created: float = 0.0
    started: float | None = None
    ended: float | None = None
    pid: int | None = None
    starttime: str | None = None
    rc: int | None = None
    log_offset: int = 0
    diagnosis: str | None = None
    proof: str | None = None
    timeline: list[dict[str, object]] = field(default_factory=list)
    gpu_pids: list[int] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> "RunRecord":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})  # type: ignore[arg-type]

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @property
    def ended_(self) -> bool:
        return self.status in ENDED


class RunStore:
    """Local run records."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or (state_dir() / "runs")

    def path(self, run_id: str) -> Path:
        return self.root / f"{check_run_id(run_id)}.json"

    def save(self, rec: RunRecord) -> None:
        atomic_write_json(self.path(rec.run_id), rec.to_json(), mode=0o600)

    def load(self, run_id: str) -> RunRecord | None:
        try:
            return RunRecord.from_json(json.loads(self.path(run_id).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def all(self, target: str | None = None) -> list[RunRecord]:
        out: list[RunRecord] = []
        if not self.root.is_dir():
            return out
        for p in sorted(self.root.glob("*.json")):
            try:
                rec = RunRecord.from_json(json.loads(p.read_text()))
            except (OSError, ValueError, TypeError):
                continue
            if target is None or rec.target == target:
                out.append(rec)
        out.sort(key=lambda r: (r.created, r.run_id))
        return out

    def update(self, run_id: str, **changes: object) -> RunRecord | None:
        rec = self.load(run_id)
        if rec is None:
            return None
        for k, v in changes.items():
            setattr(rec, k, v)
        self.save(rec)
        return rec


# ============================================================================ host scripts

#: the kinds of detached things with a folder each under ``${TUNEDECK_HOME}``: servers,
#: host-side benchmarks and host-side A/B campaigns
KINDS = ("runs", "bench", "ab")


def _base(kind: str) -> str:
    if kind not in KINDS:
        raise UnsafeInput(f"folder kind {kind!r}: expected one of {', '.join(KINDS)}")
    return f'base="${{TUNEDECK_HOME:-$HOME/.tunedeck}}/{kind}"\n'


_RUNS_BASE = _base("runs")

# $1 = run id. Prints DIR <dir>, then PID <pid> <starttime> once the wrapper started.
_LAUNCH_SCRIPT = r"""set -u
rid="$1"
{base}umask 077
dir="$base/$rid"
start_cwd=$(pwd)
mkdir -p "$dir" || {{ echo "ERR cannot create $dir"; exit 3; }}
cd "$dir" || exit 3
printf '%s\n' "$start_cwd" > cwd
cat > run.sh <<'{d}'
cd "$(dirname -- "$0")" || exit 1
echo $$ > pid.tmp && mv pid.tmp pid
sed 's/.*) //' /proc/$$/stat | cut -d' ' -f20 > starttime.tmp && mv starttime.tmp starttime
trap true TERM
run_dir=$(pwd)
# the command (with any secret) lives in this shell only: its 0600 file is gone before it runs
. ./cmd.env; rm -f ./cmd.env
cd -- "$(cat cwd)" 2>/dev/null || cd -- "$HOME" 2>/dev/null || cd /
"$@" >> "$run_dir/log" 2>&1 < /dev/null
echo $? > "$run_dir/rc"
{d}
cat > cmd.env <<'{d}'
set -- {cmd}
{d}
cat > argv.json <<'{d}'
{argv_json}
{d}
cat > env.json <<'{d}'
{env_json}
{d}
cat > meta.json <<'{d}'
{meta_json}
{d}
: > log
echo "DIR $dir"
# setsid -f: the server in its own session, not a child of this shell; LocalHost and sshd give
# this shell only 0/1/2, so the server holds none of the caller's pipes. Without setsid -f
# (busybox, old util-linux): python3 forks, closes any other descriptor and detaches.
if setsid -f true >/dev/null 2>&1; then
  setsid -f sh "$dir/run.sh" >/dev/null 2>&1 < /dev/null
elif command -v python3 >/dev/null 2>&1; then
  python3 -c 'import os,sys
if os.fork() == 0:
    os.setsid()
    os.closerange(3, 65536)
    os.execvp("sh", ["sh", sys.argv[1]])' "$dir/run.sh" >/dev/null 2>&1 < /dev/null
else
  echo "ERR neither setsid -f nor python3 is available to detach the server"; exit 4
fi
i=0
while [ ! -s starttime ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
if [ -s starttime ]; then echo "PID $(cat pid) $(cat starttime)"; else echo "ERR the server wrapper did not start"; exit 5; fi
"""

_LIST_SCRIPT = (
    _RUNS_BASE
    + r"""[ -d "$base" ] || exit 0
for d in "$base"/*/; do
  [ -f "$d/run.sh" ] || continue
  d=${d%/}
  id=${d##*/}
  pid=$(cat "$d/pid" 2>/dev/null)
  st=$(cat "$d/starttime" 2>/dev/null)
  rc=$(cat "$d/rc" 2>/dev/null)
  alive=0
  if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then
    set -- $(sed 's/.*) //' "/proc/$pid/stat")
    # a zombie (Z) or dead (X) wrapper has ended, even before its parent reaps it
    [ "${20}" = "$st" ] && [ "$1" != Z ] && [ "$1" != X ] && alive=1
  fi
  size=$(wc -c < "$d/log" 2>/dev/null | tr -d ' ')
  meta=$(tr -d '\n\t' < "$d/meta.json" 2>/dev/null)
  [ -n "$meta" ] || meta='{}'
  printf 'RUN\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$pid" "$st" "$alive" "$rc" "${size:-0}" "$d" "$meta"
done
"""
)

# $1 run dir, $2 grace seconds, $3 run id.
_STOP_SCRIPT = r"""dir="$1"; grace="$2"; rid="$3"
pid=$(cat "$dir/pid" 2>/dev/null)
want=$(cat "$dir/starttime" 2>/dev/null)
rm -f "$dir/cmd.env"
markers() {
  grep -lszx "TUNEDECK_RUN_ID=$rid" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -vx "$$"
}
group() {
  [ -n "$pid" ] || return 0
  if command -v ps >/dev/null 2>&1; then
    ps -e -o pid= -o pgid= -o stat= 2>/dev/null | awk -v g="$pid" '$2 == g && $3 !~ /^Z/ { print $1 }'
  else
    for s in /proc/[0-9]*/stat; do
      g=$(sed 's/.*) //' "$s" 2>/dev/null | cut -d' ' -f3)
      [ "$g" = "$pid" ] && { p=${s#/proc/}; echo "${p%/stat}"; }
    done
  fi
}
members() { { group; markers; } | sort -u; }
# kill -s SIG -- TARGETS (dash rejects kill -TERM -- -PGID: "Illegal number"); busybox sh
# rejects the '--' and gets kill -SIG TARGETS. A failure whose target still exists is reported.
sig() {
  sg=$1; shift
  e=$(kill -s "$sg" -- "$@" 2>&1) || e=$(kill -"$sg" "$@" 2>&1) || case $e in
    *[Nn]o\ such\ process*) ;; *) echo "WARN kill -s $sg -- $* failed: $e" | tr '\n' ' '; echo;; esac
}
zombie() { [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" = Z ]; }
if [ -z "$pid" ] || [ ! -r "/proc/$pid/stat" ] || zombie "$pid"; then
  if [ -f "$dir/rc" ]; then
    left=$(markers)
    if [ -n "$left" ]; then sig KILL $left; echo "PIDS $left"; fi
    echo "STATE EXITED $(cat "$dir/rc")"
  else
    echo "STATE STALE process $pid is gone and wrote no exit status"
  fi
  exit 0
fi
cur=$(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f20)
if [ "$cur" != "$want" ]; then
  echo "STATE STALE pid $pid now belongs to another process (start time $cur, recorded $want)"
  exit 0
fi
all=$(members)
echo "PIDS" $all
sig TERM "-$pid"
for p in $(markers); do sig TERM "$p"; done
end=$(( $(date +%s) + grace ))
left=$(members)
while [ -n "$left" ] && [ "$(date +%s)" -lt "$end" ]; do
  sleep 0.2
  left=$(members)
done
if [ -z "$left" ]; then echo "STATE STOPPED TERM"; exit 0; fi
sig KILL "-$pid"
sig KILL $left
i=0
while [ $i -lt 20 ]; do
  left=$(members)
  [ -z "$left" ] && break
  sleep 0.1; i=$((i+1))
done
if [ -z "$left" ]; then echo "STATE STOPPED KILL"; exit 0; fi
for p in $left; do
  echo "REMAIN $p $(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f1)"
done
echo "STATE STUCK"
"""


def _delimiter(*texts: str) -> str:
    while True:
        d = f"TUNEDECK_EOF_{secrets.token_hex(8)}"
        if not any(d in t for t in texts):
            return d


# ============================================================================ data


@dataclass(frozen=True)
class HostRun:
    """A run folder found on a host."""

    run_id: str
    pid: int | None
    starttime: str | None
    alive: bool
    rc: int | None
    log_size: int
    run_dir: str
    meta: dict[str, object]

    @property
    def log_path(self) -> str:
        return f"{self.run_dir}/log"


@dataclass(frozen=True)
class StopResult:
    """Outcome of :func:`stop_run`. ``state``: stopped | exited | stale | stuck | error."""

    state: str
    message: str
    pids: tuple[int, ...] = ()
    remaining: tuple[str, ...] = ()
    gpu_freed_mib: float | None = None
    gpu_released: bool | None = None
    escalated: bool = False


# ============================================================================ GPU helpers


async def compute_apps(host: Host, timeout: float = 10.0) -> list[tuple[int, str, float | None]] | None:
    """``nvidia-smi --query-compute-apps`` as (pid, gpu_uuid, used MiB); None when nvidia-smi
    is missing or failed (no GPU information)."""
    r = await host.run(
        ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
        timeout=timeout,
    )
    if not r.ok:
        return None
    out: list[tuple[int, str, float | None]] = []
    for line in r.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        mem: float | None
        try:
            mem = float(parts[2]) if len(parts) > 2 else None
        except ValueError:
            mem = None
        out.append((int(parts[0]), parts[1], mem))
    return out


async def gpu_memory_used(host: Host, timeout: float = 10.0) -> dict[int, float] | None:
    r = await host.run(
        ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"], timeout=timeout
    )
    if not r.ok:
        return None
    out: dict[int, float] = {}
    for line in r.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            try:
                out[int(parts[0])] = float(parts[1])
            except ValueError:
                pass
    return out


# ============================================================================ operations


async def list_host_runs(host: Host, kind: str = "runs") -> list[HostRun]:
    """Run folders on the host, alive or not (alive = pid with the recorded start time);
    ``kind`` ``bench`` or ``ab`` lists the host-side jobs instead of the servers."""
    script = _LIST_SCRIPT if kind == "runs" else _LIST_SCRIPT.replace(_RUNS_BASE, _base(kind), 1)
    r = await host.run_script(script, timeout=60)
    if r.lost or r.timed_out:
        raise HostError("connection-lost" if r.lost else "timeout", f"listing runs failed: {r.stderr.strip()}")
    runs: list[HostRun] = []
    for line in r.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) != 9 or parts[0] != "RUN":
            continue
        _, rid, pid, st, alive, rc, size, d, meta = parts
        try:
            m = json.loads(meta) if meta else {}
        except ValueError:
            m = {}
        runs.append(
            HostRun(
                rid,
                int(pid) if pid.isdigit() else None,
                st or None,
                alive == "1",
                int(rc) if rc.lstrip("-").isdigit() else None,
                int(size) if size.isdigit() else 0,
                d,
                m if isinstance(m, dict) else {},
            )
        )
    runs.sort(key=lambda h: h.run_id)
    return runs


async def find_host_run(host: Host, run_id: str) -> HostRun | None:
    for h in await list_host_runs(host):
        if h.run_id == run_id:
            return h
    return None


def stop_command(host: Host, run_id: str) -> str:
    """The command that stops ``run_id`` on ``host``, as a user would type it."""
    t = target_name(host)
    where = "" if t == "local" else " --demo" if t == "demo" else f" --host {shlex.quote(t)}"
    return f"tunedeck stop {run_id}{where}"


async def preflight(host: Host, store: RunStore | None = None) -> None:
    """Refuse when a run is alive on the host or a GPU holds an unknown process."""
    runs = await list_host_runs(host)
    alive = [h for h in runs if h.alive]
    if alive:
        h = alive[0]
        raise LaunchRefused(
            f"{target_name(host)}: run {h.run_id} (pid {h.pid}) is still running; stop it first "
            f"({stop_command(host, h.run_id)})"
        )
    apps = await compute_apps(host)
    if apps:
        desc = ", ".join(f"pid {p} on {u} ({'?' if m is None else f'{m:g}'} MiB)" for p, u, m in apps[:4])
        raise LaunchRefused(
            f"{target_name(host)}: the GPUs hold processes tunedeck did not start: {desc}; "
            "end them yourself (tunedeck never kills them) and launch again"
        )


async def launch(
    host: Host,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    engine: str = "other",
    port: int | None = None,
    profile: str | None = None,
    store: RunStore | None = None,
    run_id: str | None = None,
    check: bool = True,
) -> RunRecord:
    """Launch ``argv`` detached on ``host``; returns the saved local record (status ``starting``).

    Raises :class:`LaunchRefused` (nothing ran) or :class:`HostError`.
    """
    store = store or RunStore()
    argv = check_argv(list(argv), "server command")
    env = check_env(dict(env or {}), "server env")
    if engine not in ENGINES:
        raise UnsafeInput(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    if profile is not None:
        check_text(profile, "profile name")
    if port is not None and not (0 < int(port) < 65536):
        raise UnsafeInput(f"port {port!r}: expected 1-65535")
    if "TUNEDECK_RUN_ID" in env:
        raise UnsafeInput("server env: TUNEDECK_RUN_ID is set by tunedeck itself")
    if check:
        await preflight(host, store)
    rid = check_run_id(run_id or new_run_id())
    rec = RunRecord(
        run_id=rid,
        target=target_name(host),
        argv=redact_argv(argv),
        env=redact_env(env),
        engine=engine,
        port=port,
        profile=profile,
        status=LAUNCHING,
        created=time.time(),
        timeline=[{"t": time.time(), "event": "launching"}],
    )
    store.save(rec)  # the local record exists before anything runs on the host
    meta = {"engine": engine, "port": port, "profile": profile, "created": rec.created, "run_id": rid}
    started = await start_detached(host, "runs", rid, argv, env, meta)
    dir_, pid, starttime = started.run_dir, started.pid, started.starttime
    if pid is None:
        msg = started.error
        rec.status = FAILED
        rec.diagnosis = f"launch failed: {msg}"
        rec.run_dir = dir_
        rec.ended = time.time()
        rec.timeline.append({"t": time.time(), "event": "launch-failed", "message": msg})
        store.save(rec)
        if started.lost:
            raise HostError("connection-lost", f"launch of run {rid}: {msg}", target=rec.target)
        raise HostError("error", f"launch of run {rid}: {msg}", target=rec.target)
    rec.run_dir = dir_
    rec.pid = pid
    rec.starttime = starttime
    rec.status = STARTING
    rec.started = time.time()
    rec.timeline.append({"t": rec.started, "event": "process-start", "pid": pid})
    store.save(rec)
    return rec


@dataclass(frozen=True)
class Detached:
    """What :func:`start_detached` reports: the folder, and the wrapper's pid and start time
    (``pid`` None: it did not start, ``error`` says why; ``lost``: the link died meanwhile)."""

    run_dir: str | None
    pid: int | None
    starttime: str | None
    error: str = ""
    lost: bool = False


async def start_detached(
    host: Host, kind: str, rid: str, argv: Sequence[str], env: Mapping[str, str], meta: Mapping[str, object]
) -> Detached:
    """Start ``argv`` in its own session under ``${TUNEDECK_HOME}/<kind>/<rid>/`` (servers, host-side
    benchmarks and A/B campaigns alike): it outlives the link, the caller and tunedeck."""
    check_run_id(rid)
    cmd = shlex.join(["env", f"TUNEDECK_RUN_ID={rid}", *(f"{k}={v}" for k, v in env.items()), *argv])
    argv_json = json.dumps(redact_argv(argv))
    env_json = json.dumps(redact_env(env))
    meta_json = json.dumps(dict(meta))
    d = _delimiter(cmd, argv_json, env_json, meta_json)
    script = _LAUNCH_SCRIPT.format(
        base=_base(kind), d=d, cmd=cmd, argv_json=argv_json, env_json=env_json, meta_json=meta_json
    )
    r = await host.run_script(script, [rid], timeout=60)
    dir_ = pid = starttime = None
    err = None
    for line in r.stdout.splitlines():
        if line.startswith("DIR "):
            dir_ = line[4:]
        elif line.startswith("PID "):
            parts = line.split()
            if len(parts) == 3 and parts[1].isdigit():
                pid, starttime = int(parts[1]), parts[2]
        elif line.startswith("ERR "):
            err = line[4:]
    if pid is None:
        msg = err or r.stderr.strip() or ("connection lost" if r.lost else "the launch script failed")
        return Detached(dir_, None, None, msg, r.lost)
    return Detached(dir_, pid, starttime)


async def reattach(host: Host, store: RunStore | None = None) -> list[RunRecord]:
    """Find the runs on ``host`` (run folders), merge them into local records and return
    the ones still alive (status kept, or ``starting`` for a run with no local record)."""
    store = store or RunStore()
    tgt = target_name(host)
    out: list[RunRecord] = []
    for h in await list_host_runs(host):
        rec = store.load(h.run_id)
        if rec is None:
            meta = h.meta
            argv: list[str] = []
            rec = RunRecord(
                run_id=h.run_id,
                target=tgt,
                argv=argv,
                engine=str(meta.get("engine") or "other"),
                port=meta.get("port") if isinstance(meta.get("port"), int) else None,  # type: ignore[arg-type]
                profile=meta.get("profile") if isinstance(meta.get("profile"), str) else None,  # type: ignore[arg-type]
                run_dir=h.run_dir,
                status=STARTING if h.alive else (EXITED if h.rc is not None else STALE),
                created=float(meta.get("created") or 0.0),  # type: ignore[arg-type]
                pid=h.pid,
                starttime=h.starttime,
                rc=h.rc,
            )
            store.save(rec)
        elif rec.target != tgt:
            continue
        changed = False
        if not h.alive and not rec.ended_:
            rec.status = EXITED if h.rc is not None else STALE
            rec.rc = h.rc
            rec.ended = time.time()
            rec.timeline.append({"t": rec.ended, "event": "exited", "rc": h.rc})
            changed = True
        if rec.run_dir is None:
            rec.run_dir = h.run_dir
            changed = True
        if changed:
            store.save(rec)
        if h.alive:
            out.append(rec)
    return out


async def read_rc(host: Host, run_dir: str) -> int | None:
    r = await host.run(["cat", "--", f"{run_dir}/rc"], timeout=15)
    s = r.stdout.strip()
    return int(s) if r.ok and s.lstrip("-").isdigit() else None


async def process_alive(host: Host, pid: int, starttime: str | None) -> bool:
    """True while ``pid`` exists with the recorded start time and is not a zombie (an exited
    wrapper nobody reaped yet is over)."""
    script = (
        'p="$1"; want="$2"; [ -r "/proc/$p/stat" ] || { echo DEAD; exit 0; }\n'
        "rest=$(sed 's/.*) //' \"/proc/$p/stat\")\n"
        "cur=$(echo \"$rest\" | cut -d' ' -f20); st=$(echo \"$rest\" | cut -d' ' -f1)\n"
        '[ "$cur" = "$want" ] && [ "$st" != Z ] && echo ALIVE || echo DEAD\n'
    )
    r = await host.run_script(script, [str(int(pid)), starttime or ""], timeout=15)
    if r.lost or r.timed_out:
        raise HostError("connection-lost" if r.lost else "timeout", "checking the server process failed")
    return "ALIVE" in r.stdout


async def signal_folder(host: Host, run_dir: str, rid: str, grace: float) -> tuple[str, str, RunResult]:
    """TERM the process group of a run folder's wrapper (and its environ-marker matches), KILL
    after ``grace`` s; returns (state, message, raw result) with state stopped|exited|stale|stuck."""
    g = max(0, int(round(grace)))
    r = await host.run_script(_STOP_SCRIPT, [run_dir, str(g), rid], timeout=g + 30)
    state, message = "error", ""
    for line in r.stdout.splitlines():
        if line.startswith("STATE "):
            parts = line.split(None, 2)
            state = parts[1].lower()
            message = parts[2] if len(parts) > 2 else ""
    return state, message, r


async def stop_run(
    host: Host,
    rec: RunRecord,
    *,
    grace: float = 30.0,
    gpu_wait: float = 60.0,
    store: RunStore | None = None,
    poll: float = 0.5,
) -> StopResult:
    """Stop a run (reliability.md 2.2): PID-reuse guard, TERM to the group and the
    environ-marker matches, KILL after ``grace``, then wait until the GPUs no longer
    list the run's processes (``gpu_wait`` bound)."""
    store = store or RunStore()
    if not rec.run_dir:
        h = await find_host_run(host, rec.run_id)
        if h is None:
            return StopResult("error", f"run {rec.run_id}: no run folder on {target_name(host)}")
        rec.run_dir = h.run_dir
    store.update(rec.run_id, status=STOPPING) if store.load(rec.run_id) else None
    before = await gpu_memory_used(host)
    g = max(0, int(round(grace)))
    r = await host.run_script(_STOP_SCRIPT, [rec.run_dir, str(g), rec.run_id], timeout=g + 30)
    if r.lost or r.timed_out or r.exit_status not in (0, None) and "STATE" not in r.stdout:
        msg = r.stderr.strip() or ("connection lost" if r.lost else "timed out" if r.timed_out else "stop failed")
        store.update(rec.run_id, status=UNKNOWN) if store.load(rec.run_id) else None
        return StopResult("error", f"run {rec.run_id}: {msg}")
    pids: list[int] = []
    state = "error"
    message = ""
    remaining: list[str] = []
    for line in r.stdout.splitlines():
        if line.startswith("PIDS"):
            pids = [int(x) for x in line.split()[1:] if x.isdigit()]
        elif line.startswith("WARN "):
            _log.warning("stop %s on %s: %s", rec.run_id, target_name(host), visible(line[5:]))
        elif line.startswith("REMAIN "):
            remaining.append(line[7:])
        elif line.startswith("STATE "):
            parts = line.split(None, 2)
            state = parts[1].lower()
            message = parts[2] if len(parts) > 2 else ""
    escalated = message == "KILL"
    released: bool | None = None
    if state in ("stopped", "exited"):
        released = await _wait_gpu_release(host, set(pids) | ({rec.pid} if rec.pid else set()), gpu_wait, poll)
    after = await gpu_memory_used(host) if before is not None else None
    freed = None
    if before is not None and after is not None:
        freed = sum(before.values()) - sum(after.values())
    now = time.time()
    status = {"stopped": STOPPED, "exited": EXITED, "stale": STALE}.get(state, UNKNOWN)
    rc = await read_rc(host, rec.run_dir) if state in ("stopped", "exited") else None
    upd = store.load(rec.run_id)
    if upd is not None:
        upd.status = status
        upd.rc = rc
        upd.ended = upd.ended or now
        upd.timeline.append(
            {"t": now, "event": "stopped" if status == STOPPED else state, "how": message, "gpu_released": released}
        )
        store.save(upd)
    if state == "stopped":
        txt = f"run {rec.run_id} stopped ({'killed after the grace period' if escalated else 'TERM'})"
        if released is False:
            txt += f"; the GPUs still list its processes after {gpu_wait:g} s"
    elif state == "exited":
        txt = f"run {rec.run_id} had already exited (rc {message or '?'})"
    elif state == "stale":
        txt = f"run {rec.run_id}: {message or 'stale'}; nothing was killed"
    elif state == "stuck":
        txt = f"run {rec.run_id}: processes remain after KILL (D state?): {', '.join(remaining)}"
    else:
        txt = f"run {rec.run_id}: unexpected stop output: {r.stdout.strip()[:200]} {r.stderr.strip()[:200]}"
    return StopResult(state, txt, tuple(pids), tuple(remaining), freed, released, escalated)


async def _wait_gpu_release(host: Host, pids: set[int], bound: float, poll: float) -> bool | None:
    deadline = time.monotonic() + bound
    while True:
        apps = await compute_apps(host)
        if apps is None:
            return None  # no nvidia-smi: nothing to confirm
        if not any(p in pids for p, _, _ in apps):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(poll)


async def restart_run(host: Host, rec: RunRecord, *, grace: float = 30.0, store: RunStore | None = None) -> RunRecord:
    """Stop ``rec`` then launch the same command again (env values come from the caller's
    original env when available; a redacted value is refused)."""
    store = store or RunStore()
    if any(v == REDACTED for v in rec.env.values()) or any(REDACTED in a for a in rec.argv):
        raise LaunchRefused(
            f"run {rec.run_id}: its stored command holds redacted secrets; relaunch it from the profile"
        )
    res = await stop_run(host, rec, grace=grace, store=store)
    if res.state not in ("stopped", "exited", "stale"):
        raise LaunchRefused(res.message)
    return await launch(host, rec.argv, rec.env, engine=rec.engine, port=rec.port, profile=rec.profile, store=store)


# ============================================================================ log follow


class LogFollower:
    """Follow a run's log from a byte offset: ``echo $$; exec tail -c +N -F log``.

    Iterate for byte chunks; :attr:`offset` is the number of log bytes consumed.
    After a lost connection, create a new follower from :attr:`offset` (or call
    :meth:`chunks` again): no byte is lost or repeated. With ``persist=True`` the
    offset is saved in the run record (throttled, and on close).
    """

    def __init__(
        self,
        host: Host,
        log_path: str,
        offset: int = 0,
        *,
        run_id: str | None = None,
        store: RunStore | None = None,
        persist: bool = False,
        persist_every: float = 0.25,
    ) -> None:
        check_text(log_path, "log path")
        self.host = host
        self.log_path = log_path
        self.offset = int(offset)
        self.run_id = run_id
        self.store = store or (RunStore() if persist else None)
        self.persist = persist and run_id is not None
        self.persist_every = persist_every
        self.remote_pid: int | None = None
        self._stream: ByteStream | None = None
        self._saved = self.offset
        self._last_save = 0.0

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        argv = ["/bin/sh", "-c", 'echo $$; exec tail -c +"$1" -F -- "$2" 2>/dev/null', "sh", str(self.offset + 1), self.log_path]
        stream = self.host.stream(argv)
        self._stream = stream
        head = b""
        got_pid = False
        try:
            async with stream:
                async for chunk in stream:
                    if not got_pid:
                        head += chunk
                        if b"\n" not in head:
                            continue
                        first, chunk = head.split(b"\n", 1)
                        got_pid = True
                        self.remote_pid = int(first) if first.strip().isdigit() else None
                        if not chunk:
                            continue
                    self._maybe_save()
                    self.offset += len(chunk)
                    yield chunk
        finally:
            # Closing the stream (above) already ended the remote tail, or, when the link is
            # gone, queued it to be killed once the host reconnects (SshHost reaps stale streams,
            # guarded by start time). Killing it here would reconnect, with retries, before the
            # lost link reaches the caller: a dead link must be reported first.
            self._stream = None
            self.save()

    def _maybe_save(self) -> None:
        if self.persist and self.offset != self._saved and time.monotonic() - self._last_save >= self.persist_every:
            self.save()

    def save(self) -> None:
        if not self.persist or self.store is None or self.run_id is None or self.offset == self._saved:
            return
        self.store.update(self.run_id, log_offset=self.offset)
        self._saved = self.offset
        self._last_save = time.monotonic()

    async def close(self) -> None:
        s = self._stream
        if s is not None:
            await s.aclose()


async def follow_forever(
    host: Host,
    log_path: str,
    offset: int,
    on_chunk: Callable[[bytes], None],
    stop: asyncio.Event,
    *,
    idle: float = 1.0,
    on_idle: Callable[[], object] | None = None,
    on_error: Callable[[Exception, int], None] | None = None,
    run_id: str | None = None,
    store: RunStore | None = None,
    persist: bool = False,
) -> int:
    """Follow ``log_path`` from ``offset`` until ``stop`` is set, reconnecting with
    backoff after a lost link (resuming at the consumed offset, so nothing is lost or
    repeated). ``on_idle`` runs after ``idle`` seconds without data. Returns the offset."""
    backoff = 0.5
    attempt = 0
    while not stop.is_set():
        f = LogFollower(host, log_path, offset, run_id=run_id, store=store, persist=persist)
        it = f.chunks().__aiter__()
        try:
            while not stop.is_set():
                try:
                    chunk = await asyncio.wait_for(it.__anext__(), idle)
                except asyncio.TimeoutError:
                    if on_idle is not None:
                        on_idle()
                    continue
                except StopAsyncIteration:
                    # ``tail -F`` never ends on its own: its stream ending means the link went
                    if not stop.is_set():
                        raise HostError("connection-lost", f"following {log_path}: the stream ended",
                                        target=target_name(host)) from None
                    break
                offset = f.offset
                on_chunk(chunk)
                backoff, attempt = 0.5, 0
        except (HostError, OSError) as e:
            attempt += 1
            if on_error is not None:
                on_error(e, attempt)
        finally:
            offset = f.offset
            try:
                await it.aclose()  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001
                pass
            await f.close()
        if not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), backoff)
            except asyncio.TimeoutError:
                pass
            backoff = min(backoff * 2, 10.0)
    return offset


async def read_log(host: Host, log_path: str, offset: int = 0, limit: int | None = None) -> bytes:
    """The log from ``offset`` (at most ``limit`` bytes) as bytes (one command)."""
    check_text(log_path, "log path")
    script = 'tail -c +"$1" -- "$2"' + (' | head -c "$3"' if limit else "")
    args = [str(int(offset) + 1), log_path] + ([str(int(limit))] if limit else [])
    r = await host.run_script(script, args, timeout=60)
    if r.lost or r.timed_out:
        raise HostError("connection-lost" if r.lost else "timeout", f"reading {log_path} failed")
    return r.stdout.encode("utf-8")


# ============================================================================ lookups


def demo_argv(argv: Sequence[str]) -> list[str]:
    """``python -m tui sim …`` → the demo host's ``tunedeck`` shim, which sets PYTHONPATH
    itself, so the simulator starts whatever the server's working directory."""
    argv = list(argv)
    if len(argv) >= 3 and argv[1:3] == ["-m", "tui"]:
        return ["tunedeck", *argv[3:]]
    return argv



def host_for_record(rec: RunRecord) -> Host:
    if rec.target == "demo":
        return get_host(None, demo=True)
    return get_host(None if rec.target == "local" else rec.target)


def pick_run(records: Sequence[RunRecord], run: str | None) -> RunRecord | None:
    """A run by id or unique id prefix; without ``run`` the most recent one."""
    if run is None:
        return records[-1] if records else None
    exact = [r for r in records if r.run_id == run]
    if exact:
        return exact[0]
    pref = [r for r in records if r.run_id.startswith(run)]
    return pref[-1] if len(pref) >= 1 else None


__all__ = [
    "HostRun",
    "LaunchRefused",
    "LogFollower",
    "RunRecord",
    "RunResult",
    "RunStore",
    "StopResult",
    "compute_apps",
    "demo_argv",
    "find_host_run",
    "follow_forever",
    "gpu_memory_used",
    "launch",
    "list_host_runs",
    "new_run_id",
    "pick_run",
    "preflight",
    "process_alive",
    "read_log",
    "read_rc",
    "reattach",
    "restart_run",
    "stop_run",
]
