"""Detached server launch, run discovery and stop (docs/reliability.md section 2).

Everything runs through :class:`tui.hostops.hosts.Host` primitives (``run_script``,
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

Locally each run has a record ``state_dir()/runs/<run_id>.json``
(:class:`tui.hostops.runstore.RunRecord`), written *before* the launch. The host
scripts are in :mod:`tui.hostops.hostscripts`, log reading and following in
:mod:`tui.hostops.logfollow`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shlex
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from tui.hostops.hosts import Host, HostError, RunResult, target_name
from tui.hostops.hostscripts import LAUNCH_SCRIPT, LIST_SCRIPT, RUNS_BASE, STOP_SCRIPT, base_line, delimiter
from tui.hostops.reread import settle
from tui.hostops.runstore import (
    ENGINES,
    EXITED,
    FAILED,
    LAUNCHING,
    STALE,
    STARTING,
    STOPPED,
    STOPPING,
    UNKNOWN,
    RunRecord,
    RunStore,
    check_run_id,
    new_run_id,
)
from tui.util.safety import (
    REDACTED,
    UnsafeInput,
    check_argv,
    check_env,
    check_text,
    flag_value,
    redact_argv,
    redact_env,
    safe_line,
    visible,
)

_log = logging.getLogger(__name__)


class LaunchRefused(Exception):
    """A launch was refused before anything ran (a run is alive, the GPUs are busy, bad input)."""


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
        [host.nvidia_smi, "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
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
        out.append((int(parts[0]), safe_line(parts[1]), mem))  # host text: shown in refusals
    return out


async def gpu_memory_used(host: Host, timeout: float = 10.0) -> dict[int, float] | None:
    r = await host.run(
        [host.nvidia_smi, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"], timeout=timeout
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
    script = LIST_SCRIPT if kind == "runs" else LIST_SCRIPT.replace(RUNS_BASE, base_line(kind), 1)
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


_GPU_ID_RE = re.compile(r"[A-Za-z0-9_-]+")


def gpu_set(env: Mapping[str, str]) -> str:
    """The GPUs a server started with ``env`` uses, as the launch script compares them:
    ``CUDA_VISIBLE_DEVICES`` (``"0,1"``), ``"none"`` when it is empty, else ``"all"``."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return "all"
    ids = [p.strip() for p in value.split(",") if p.strip()]
    if not ids:
        return "none"
    return ",".join(ids) if all(_GPU_ID_RE.fullmatch(p) for p in ids) else "all"


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

    Raises :class:`LaunchRefused` (nothing ran) or :class:`HostError`. With ``check``, the host
    refuses atomically (a lock held from its check to the start) when a live run uses any of the
    same GPUs (:func:`gpu_set`): of two launches at once, one starts.
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
    gpus = gpu_set(env)
    meta = {"engine": engine, "port": port, "profile": profile, "created": rec.created, "run_id": rid, "gpus": gpus}
    started = await start_detached(host, "runs", rid, argv, env, meta, gpus=gpus if check else None)
    dir_, pid, starttime = started.run_dir, started.pid, started.starttime
    if started.busy is not None:
        store.delete(rid)  # nothing ran
        other, other_pid, other_gpus = started.busy
        on = "the same GPUs" if "all" in (gpus, other_gpus) else f"GPUs {other_gpus} (this one: {gpus})"
        raise LaunchRefused(
            f"{target_name(host)}: run {other} (pid {other_pid}) is starting or running on {on}; "
            f"stop it first ({stop_command(host, other)})"
        )
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
    (``pid`` None: it did not start, ``error`` says why; ``lost``: the link died meanwhile, or no
    answer came in time, so it may have started all the same)."""

    run_dir: str | None
    pid: int | None
    starttime: str | None
    error: str = ""
    lost: bool = False
    #: (run id, pid, its GPUs) of the live run that made the host refuse (nothing started)
    busy: tuple[str, int, str] | None = None


def launch_script(
    kind: str,
    rid: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    meta: Mapping[str, object],
    *,
    gpus: str | None = None,
) -> tuple[str, list[str]]:
    """The launch script for :func:`start_detached` and its arguments (``sh -s -- ARGS``)."""
    check_run_id(rid)
    if gpus is not None and not all(_GPU_ID_RE.fullmatch(g) for g in gpus.split(",")):
        raise UnsafeInput(f"GPU set {gpus!r}: expected all, none or ids such as 0,1")
    cmd = shlex.join(["env", f"TUNEDECK_RUN_ID={rid}", *(f"{k}={v}" for k, v in env.items()), *argv])
    argv_json = json.dumps(redact_argv(argv))
    env_json = json.dumps(redact_env(env))
    meta = dict(meta)
    # the server's API key, for the clients that benchmark it (tui.bench.config.auth_headers): a
    # 0600 file in the run's folder (umask 077), written from this script's body, never from argv
    key, where = flag_value(argv, "--api-key"), "--api-key"
    if key is None:  # vLLM also takes its key from the environment
        key, where = env.get(API_KEY_ENV), API_KEY_ENV
    if key is not None and (not key or any(c.isspace() or ord(c) < 32 for c in key)):
        raise UnsafeInput(f"{where}: expected one key without spaces or control characters")
    if key:
        meta["api_key"] = True
    meta_json = json.dumps(meta)
    d = delimiter(cmd, argv_json, env_json, meta_json, key or "")
    secrets = f"put {API_KEY_FILE} <<'{d}'\n{key}\n{d}\n" if key else ""
    script = LAUNCH_SCRIPT.format(
        base=base_line(kind),
        d=d,
        cmd=cmd,
        argv_json=argv_json,
        env_json=env_json,
        meta_json=meta_json,
        secrets=secrets,
    )
    return script, [rid, gpus or ""]


#: the file of a run's folder that holds the server's API key (0600), when it was launched with one
API_KEY_FILE = "api_key"
#: the environment variable a server takes its API key from when ``--api-key`` is not given
#: (vLLM's ``VLLM_API_KEY``; SGLang documents none): its key file is written the same way
API_KEY_ENV = "VLLM_API_KEY"


async def serving_run(host: Host, port: int | None) -> HostRun | None:
    """The live tunedeck run on ``host`` that serves ``port`` (None: none does)."""
    if port is None:
        return None
    for run in await list_host_runs(host):
        if run.alive and run.meta.get("port") == port and run.run_dir:
            return run
    return None


def api_key_file(run: HostRun) -> str | None:
    """The API key file of ``run`` (None: it was launched without a key). The clients read it
    where they run: the key never travels in a command or a spec."""
    return f"{run.run_dir}/{API_KEY_FILE}" if run.meta.get("api_key") else None


async def server_of(host: Host, run: HostRun) -> dict[str, object]:
    """What a benchmark records of the server it measured, when tunedeck launched it: the
    command and environment as launched (secrets already redacted in the run folder), the
    engine and the run. So Compare knows the configuration, and two benchmarks of the same
    configuration compare identical."""
    out: dict[str, object] = {"launch_run_id": run.run_id, "engine": run.meta.get("engine") or ""}
    r = await host.run(["cat", f"{run.run_dir}/argv.json", f"{run.run_dir}/env.json"], timeout=20)
    docs = []
    for line in r.stdout.splitlines():
        try:
            docs.append(json.loads(line))
        except ValueError:
            continue
    argv = next((d for d in docs if isinstance(d, list)), None)
    env = next((d for d in docs if isinstance(d, dict)), None)
    if argv is not None:
        out["argv"] = [str(x) for x in argv]
    if env is not None:
        out["env"] = {str(k): str(v) for k, v in env.items()}
    out["server_log"] = run.log_path
    return out


async def start_detached(
    host: Host,
    kind: str,
    rid: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    meta: Mapping[str, object],
    *,
    gpus: str | None = None,
) -> Detached:
    """Start ``argv`` in its own session under ``${TUNEDECK_HOME}/<kind>/<rid>/`` (servers, host-side
    benchmarks and A/B campaigns alike): it outlives the link, the caller and tunedeck. With
    ``gpus`` (:func:`gpu_set`), nothing starts while a live run of that folder uses any of them
    (:attr:`Detached.busy`); the check and the start hold one lock on the host."""
    script, args = launch_script(kind, rid, argv, env, meta, gpus=gpus)
    r = await host.run_script(script, args, timeout=60)
    dir_ = pid = starttime = None
    err = None
    for line in r.stdout.splitlines():
        if line.startswith("BUSY "):
            parts = line.split()
            if len(parts) == 4 and parts[2].isdigit():
                return Detached(
                    None, None, None, f"run {parts[1]} uses the GPUs", busy=(parts[1], int(parts[2]), parts[3])
                )
        elif line.startswith("DIR "):
            dir_ = line[4:]
        elif line.startswith("PID "):
            parts = line.split()
            if len(parts) == 3 and parts[1].isdigit():
                pid, starttime = int(parts[1]), parts[2]
        elif line.startswith("ERR "):
            err = line[4:]
    if pid is None:
        msg = err or r.stderr.strip() or ("connection lost" if r.lost else "the launch script failed")
        return Detached(dir_, None, None, msg, r.lost or r.timed_out)
    return Detached(dir_, pid, starttime)


async def reattach(host: Host, store: RunStore | None = None) -> list[RunRecord]:
    """Find the runs on ``host`` (run folders), merge them into local records and return
    the ones still alive (status kept, or ``starting`` for a run with no local record).

    Every run is re-read from its process, whoever follows it: one whose process has ended
    since it was last seen (ready or not) is settled from its own log, ``failed`` with the
    cause (:mod:`tui.hostops.reread`), or ``stopped`` when a stop was asked for."""
    store = store or RunStore()
    tgt = target_name(host)
    out: list[RunRecord] = []
    for h in await list_host_runs(host):
        rec = store.load(h.run_id)
        new = rec is None
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
                status=STARTING,
                created=float(meta.get("created") or 0.0),  # type: ignore[arg-type]
                pid=h.pid,
                starttime=h.starttime,
                rc=h.rc,
            )
        elif rec.target != tgt:
            continue
        changed = new
        if not h.alive and not rec.ended_:
            status, diag, proof = await settle(
                host, h.run_dir, rec.engine, h.rc, stopping=rec.status == STOPPING, size=h.log_size
            )
            prev = rec.status
            rec.status, rec.rc, rec.ended = status, h.rc, time.time()
            rec.diagnosis, rec.proof = diag, proof
            rec.timeline.append({"t": rec.ended, "event": status, "rc": h.rc, "diagnosis": diag, "was": prev})
            if prev not in (STARTING, LAUNCHING, STOPPING):
                _log.warning("run %s on %s was %s and has ended: %s", rec.run_id, tgt, prev, visible(diag))
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
    g = max(0, round(grace))
    r = await host.run_script(STOP_SCRIPT, [run_dir, str(g), rid], timeout=g + 30)
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
    g = max(0, round(grace))
    r = await host.run_script(STOP_SCRIPT, [rec.run_dir, str(g), rec.run_id], timeout=g + 30)
    if r.lost or r.timed_out or (r.exit_status not in (0, None) and "STATE" not in r.stdout):
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


# ============================================================================ lookups


def demo_argv(argv: Sequence[str]) -> list[str]:
    """``python -m tui sim …`` → the demo host's ``tunedeck`` shim, which sets PYTHONPATH
    itself, so the simulator starts whatever the server's working directory."""
    argv = list(argv)
    if len(argv) >= 3 and argv[1:3] == ["-m", "tui"]:
        return ["tunedeck", *argv[3:]]
    return argv


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
    "StopResult",
    "compute_apps",
    "demo_argv",
    "find_host_run",
    "gpu_memory_used",
    "launch",
    "list_host_runs",
    "pick_run",
    "preflight",
    "process_alive",
    "read_rc",
    "reattach",
    "restart_run",
    "stop_run",
]
