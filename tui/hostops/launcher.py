"""Detached server launch, run discovery and stop (docs/reliability.md section 2).

Everything runs through :class:`tunedeck.hostops.hosts.Host` primitives (``run_script``,
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
(:class:`tunedeck.hostops.runstore.RunRecord`), written *before* the launch. The host
scripts are in :mod:`tunedeck.hostops.hostscripts`, log reading and following in
:mod:`tunedeck.hostops.logfollow`; the runs found on a host (listed, reattached) in
:mod:`tunedeck.hostops.hostruns`, the stop in :mod:`tunedeck.hostops.runstop`, what the GPUs
hold in :mod:`tunedeck.hostops.gpuquery`. The startup tracker reads a run's process through
this module (``process_alive``, ``read_rc``, ``gpu_memory_used``, ``stop_run``).
"""

from __future__ import annotations

import json
import re
import shlex
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from tunedeck.hostops.gpuquery import compute_apps, gpu_memory_used
from tunedeck.hostops.hostruns import HostRun, list_host_runs
from tunedeck.hostops.hosts import Host, HostError, target_name
from tunedeck.hostops.hostscripts import LAUNCH_SCRIPT, base_line, delimiter
from tunedeck.hostops.runstop import process_alive, read_rc, stop_run
from tunedeck.hostops.runstore import (
    ENGINES,
    FAILED,
    LAUNCHING,
    STARTING,
    RunRecord,
    RunStore,
    check_run_id,
    new_run_id,
)
from tunedeck.util.safety import (
    REDACTED,
    UnsafeInput,
    check_argv,
    check_env,
    check_text,
    flag_value,
    redact_argv,
    redact_env,
)


class LaunchRefused(Exception):
    """A launch was refused before anything ran (a run is alive, the GPUs are busy, bad input)."""


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
    started = await start_detached(host, launch_script("runs", rid, argv, env, meta, gpus=gpus if check else None))
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
    answer came in time, so it may have started all the same; ``followed``: a restart found
    another process in the folder, started since the one it was to replace, and started none)."""

    run_dir: str | None
    pid: int | None
    starttime: str | None
    error: str = ""
    lost: bool = False
    #: (run id, pid, its GPUs) of the live run that made the host refuse (nothing started)
    busy: tuple[str, int, str] | None = None
    followed: bool = False


def launch_script(
    kind: str,
    rid: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    meta: Mapping[str, object],
    *,
    gpus: str | None = None,
    expect: tuple[int | None, str | None] | None = None,
) -> tuple[str, list[str]]:
    """The launch script that starts ``argv`` in its own session under ``${TUNEDECK_HOME}/<kind>/<rid>/``
    (servers, host-side benchmarks and A/B campaigns alike), and its arguments (``sh -s -- ARGS``):
    :func:`start_detached` runs it; what it starts outlives the link, the caller and tunedeck. With
    ``gpus`` (:func:`gpu_set`), nothing starts while a live run of that folder uses any of them
    (:attr:`Detached.busy`); the check and the start hold one lock on the host.

    ``expect`` (pid, start time) restarts the job in its existing folder: only if the process
    there is still that one and has ended (else :attr:`Detached.followed`: the process there now,
    started by someone else, nothing started); its log is kept as ``log.1`` (``log.2``, ``log.3``
    before it)."""
    check_run_id(rid)
    if gpus is not None and not all(_GPU_ID_RE.fullmatch(g) for g in gpus.split(",")):
        raise UnsafeInput(f"GPU set {gpus!r}: expected all, none or ids such as 0,1")
    cmd = shlex.join(["env", f"TUNEDECK_RUN_ID={rid}", *(f"{k}={v}" for k, v in env.items()), *argv])
    argv_json = json.dumps(redact_argv(argv))
    env_json = json.dumps(redact_env(env))
    meta = dict(meta)
    # the server's API key, for the clients that benchmark it (tunedeck.bench.config.auth_headers): a
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
    return script, [rid, gpus or "", _expected(expect)]


def _expected(expect: tuple[int | None, str | None] | None) -> str:
    """The launch script's third argument: empty for a new folder, else the process a restart
    replaces as ``PID STARTTIME`` (``-``: none known)."""
    if expect is None:
        return ""
    pid, starttime = expect
    if pid is None:
        return "-"
    st = starttime or ""
    if not st.isdigit() and st:
        raise UnsafeInput(f"start time {starttime!r}: expected digits")
    return f"{int(pid)} {st}"


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


async def start_detached(host: Host, launch: tuple[str, list[str]]) -> Detached:
    """Run ``launch`` (:func:`launch_script`: the script and its arguments) on ``host`` and read what
    it started, or why nothing started."""
    script, args = launch
    r = await host.run_script(script, args, timeout=60)
    dir_ = pid = starttime = None
    err = None
    followed = False
    for line in r.stdout.splitlines():
        if line.startswith("BUSY "):
            parts = line.split()
            if len(parts) == 4 and parts[2].isdigit():
                return Detached(
                    None, None, None, f"run {parts[1]} uses the GPUs", busy=(parts[1], int(parts[2]), parts[3])
                )
        elif line.startswith("DIR "):
            dir_ = line[4:]
        elif line.startswith(("PID ", "FOLLOW ")):
            parts = line.split()
            if len(parts) in (2, 3) and parts[1].isdigit():  # FOLLOW: a start time may be missing
                pid, starttime = int(parts[1]), parts[2] if len(parts) == 3 else None
                followed = parts[0] == "FOLLOW"
        elif line.startswith("ERR "):
            err = line[4:]
    if pid is None:
        msg = err or r.stderr.strip() or ("connection lost" if r.lost else "the launch script failed")
        return Detached(dir_, None, None, msg, r.lost or r.timed_out)
    return Detached(dir_, pid, starttime, followed=followed)


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


def demo_argv(argv: Sequence[str]) -> list[str]:
    """``python -m tunedeck sim …`` → the demo host's ``tunedeck`` shim, which runs tunedeck's own
    interpreter, so the simulator starts whatever the server's working directory."""
    argv = list(argv)
    if len(argv) >= 3 and argv[1:3] == ["-m", "tunedeck"]:
        return ["tunedeck", *argv[3:]]
    return argv


__all__ = [
    "API_KEY_ENV",
    "API_KEY_FILE",
    "Detached",
    "HostRun",
    "LaunchRefused",
    "api_key_file",
    "compute_apps",
    "demo_argv",
    "gpu_memory_used",
    "gpu_set",
    "launch",
    "launch_script",
    "list_host_runs",
    "preflight",
    "process_alive",
    "read_rc",
    "restart_run",
    "server_of",
    "serving_run",
    "start_detached",
    "stop_command",
    "stop_run",
]
