"""Host-side jobs from the laptop: start, follow by byte offset, mirror, stop.

A job (a benchmark or an A/B campaign) runs detached on the host under
``${TUNEDECK_HOME}/<kind>/<id>/`` (layout: :mod:`tunedeck.hostside.jobfiles`).
:class:`JobFollower` reads its ``events.jsonl`` from a byte offset with
``tail -c +N -F`` and resumes at the consumed offset after a lost link, so no
event is lost or repeated; :func:`mirror_results` copies its result folders
into the local results store (samples appended from the local file's size), in
the same layout as a local run, so ``results``, ``compare`` and the journal
need no special case. Each mirrored folder has an ``origin.json`` naming the
host and the job.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Mapping, Sequence

from tunedeck.hostops import hostruns, launcher, logfollow, runstop, runstore
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostside import jobfiles
from tunedeck.hostside.jobfiles import ExitRecord, exit_record, read_exit
from tunedeck.services import runtime
from tunedeck.util.aio import cancel_and_wait
from tunedeck.util.files import atomic_write_json, atomic_write_text, os_error_text
from tunedeck.util.paths import data_dir
from tunedeck.util.retry import Backoff

log = logging.getLogger(__name__)

ORIGIN = "origin.json"


class JobError(Exception):
    """A job that cannot be started, found or followed; the message names the host and the id."""


@dataclass(frozen=True)
class Job:
    kind: str  # "bench" | "ab" | "tune"
    job_id: str
    dir: str  # on the host
    target: str
    pid: int | None = None
    starttime: str | None = None
    alive: bool = True
    rc: int | None = None
    meta: Mapping[str, Any] | None = None

    @property
    def events_path(self) -> str:
        return f"{self.dir}/{jobfiles.EVENTS}"


def results_root() -> Path:
    return data_dir() / "results"


async def start(
    host: Host, kind: str, spec: Mapping[str, Any], *, python: str | None = None, meta: Mapping[str, Any] | None = None
) -> Job:
    """Ship the runtime if needed, write the spec (0600) and start the job detached."""
    rt = await runtime.ensure(host, python=python)
    jid = runstore.new_run_id()
    jdir = f"{rt.home}/{kind}/{jid}"
    try:
        await host.put_file(json.dumps(spec, default=str).encode("utf-8"), f"{jdir}/{jobfiles.SPEC}")
    except OSError as e:
        raise JobError(f"{host.target}: writing the {kind} job's spec failed: {os_error_text(e)}") from None
    info = {
        "kind": kind,
        "created": time.time(),
        "run_id": jid,
        "python": rt.python,
        "python_version": rt.python_version,
        "runtime": os.path.basename(rt.archive),
        **dict(meta or {}),
    }
    # the job's GPU timeline queries the host's nvidia-smi (the simulated one on a --sim target)
    env = {} if host.nvidia_smi == "nvidia-smi" else {"TUNEDECK_NVIDIA_SMI": host.nvidia_smi}
    started = await launcher.start_detached(host, launcher.launch_script(kind, jid, rt.argv(kind, jdir), env, info))
    if started.pid is None:
        raise JobError(f"{host.target}: the {kind} job did not start: {started.error}")
    return Job(kind, jid, started.run_dir or jdir, host.target, started.pid, started.starttime, True, None, info)


async def restart(host: Host, job: Job, *, python: str | None = None, argv: Sequence[str] | None = None) -> Job:
    """Start ``job`` again in its own folder (a campaign whose process was killed resumes from the
    state it left there); its events file is kept, so a follower goes on at its offset, and its
    log is kept as ``log.1``. The host starts it only if the folder's process is still ``job``'s
    and has ended: when another process was started there since (by another follower, or by an
    earlier try whose answer was lost), that one is returned, and nothing is started. ``argv``:
    the command of a job run on this machine (a campaign of deployments); else the host-side
    runtime's for the job's kind."""
    if argv is None:
        rt = await runtime.ensure(host, python=python)
        argv = rt.argv(job.kind, job.dir)
        env = {} if host.nvidia_smi == "nvidia-smi" else {"TUNEDECK_NVIDIA_SMI": host.nvidia_smi}
    else:
        env = {}
    meta = {**dict(job.meta or {}), "restarted": time.time()}
    script = launcher.launch_script(job.kind, job.job_id, list(argv), env, meta, expect=(job.pid, job.starttime))
    started = await launcher.start_detached(host, script)
    if started.pid is None:
        what = f"the {job.kind} job {job.job_id} did not restart: {started.error}"
        if started.lost:  # it may have started all the same: the next try finds it there
            raise HostError("connection-lost", what, target=host.target)
        raise JobError(f"{host.target}: {what}")
    if started.followed:
        log.info(
            "%s: %s job %s: started again already (pid %s); following it",
            host.target,
            job.kind,
            job.job_id,
            started.pid,
        )
        meta = dict(job.meta or {})
    return Job(
        job.kind, job.job_id, started.run_dir or job.dir, host.target, started.pid, started.starttime, True, None, meta
    )


async def list_jobs(host: Host, kind: str) -> list[Job]:
    return [
        Job(kind, h.run_id, h.run_dir, host.target, h.pid, h.starttime, h.alive, h.rc, h.meta)
        for h in await hostruns.list_host_runs(host, kind)
    ]


async def find(host: Host, kind: str, job_id: str) -> Job:
    """A job by id or unique id prefix; :class:`JobError` names what is there instead."""
    jobs = await list_jobs(host, kind)
    exact = [j for j in jobs if j.job_id == job_id]
    if exact:
        return exact[0]
    pref = [j for j in jobs if j.job_id.startswith(job_id)]
    if len(pref) == 1:
        return pref[0]
    if len(pref) > 1:
        raise JobError(
            f"{host.target}: {kind} job id {job_id!r} is ambiguous ({', '.join(j.job_id for j in pref[:5])})"
        )
    known = ", ".join(j.job_id for j in jobs[-5:]) or "none"
    raise JobError(f"{host.target}: no {kind} job {job_id!r} (latest: {known})")


async def is_alive(host: Host, job: Job) -> bool:
    if job.pid is None:
        return False
    return await runstop.process_alive(host, job.pid, job.starttime)


async def stop(host: Host, job: Job, *, grace: float = 30.0) -> str:
    """TERM the job (it writes partial results / stops its server), KILL after ``grace``."""
    state, message, r = await runstop.signal_folder(host, job.dir, job.job_id, grace)
    if state == "stopped":
        return f"{job.kind} job {job.job_id} stopped" + (
            " (killed after the grace period)" if message == "KILL" else ""
        )
    if state == "exited":
        return f"{job.kind} job {job.job_id} had already ended (rc {message or '?'})"
    if state == "stale":
        return f"{job.kind} job {job.job_id}: {message}"
    raise JobError(
        f"{host.target}: stopping {job.kind} job {job.job_id} failed: {r.stderr.strip() or r.stdout.strip() or state}"
    )


# ---------------------------------------------------------------------- follow


#: seconds the follower keeps trying to read a finished job's last events and rc over a link
#: that fails; after that the outcome is reported lost (the job folder still holds it)
FINAL_READ_S = 300.0

_ENDED: dict[str, Any] = {"type": "_ended"}  # the watcher's word: the job's process is gone


class JobFollower:
    """The events of a job, in order, across lost links; ends after its ``exit`` event.

    ``offset`` is the number of bytes of ``events.jsonl`` consumed (complete
    lines only); start a new follower at that offset to resume. Every failure of the
    follow or of the process check, whatever its kind, is a lost link: told to
    ``on_link_error``, then retried. A job whose process is gone (finished, or killed without
    its ``exit`` event) ends the follow: the events after the consumed offset are then read
    from the job folder directly, and when none is an ``exit`` event a synthetic one carries
    the ``rc`` file's value (``None`` when there is none). What could not be read within
    :data:`FINAL_READ_S` sets :attr:`lost`.
    """

    def __init__(self, host: Host, job: Job, offset: int = 0, *, alive_every: float = 5.0) -> None:
        self.host = host
        self.job = job
        self.offset = offset
        self.alive_every = alive_every
        self.exit: ExitRecord | None = None
        self.lost = False
        self.link_errors = 0
        self.on_link_error: Any = None  # callable(Exception, attempt) for a UI line
        self.on_link_ok: Any = None  # callable() once the host answers again after a link error
        self._link_down = False
        self._buf = bytearray()

    def _parse(self, chunk: bytes, put: Any) -> None:
        """Complete lines of ``chunk`` (after what came before) as events; advances :attr:`offset`."""
        self._buf.extend(chunk)
        while True:
            i = self._buf.find(b"\n")
            if i < 0:
                return
            line = bytes(self._buf[: i + 1])
            del self._buf[: i + 1]
            self.offset += len(line)
            try:
                ev = json.loads(line)
            except ValueError:
                log.warning(
                    "%s: unreadable event line at byte %d of %s",
                    self.host.target,
                    self.offset - len(line),
                    self.job.events_path,
                )
                continue
            if isinstance(ev, dict):
                put(ev)

    def _link_error(self, e: Exception, attempt: int) -> None:
        self.link_errors += 1
        self._link_down = True
        log.info("%s: following %s: %s (attempt %d)", self.host.target, self.job.events_path, e, attempt)
        if self.on_link_error is not None:
            self.on_link_error(e, attempt)

    def _link_ok(self) -> None:
        """The host answers again after a link error (the follow resumed, or a read succeeded)."""
        if not self._link_down:
            return
        self._link_down = False
        log.info("%s: following %s: the host answers again", self.host.target, self.job.events_path)
        if self.on_link_ok is not None:
            self.on_link_ok()

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        stop = asyncio.Event()
        self._buf.clear()

        async def follow() -> None:
            attempt = 0
            while not stop.is_set():
                try:
                    await logfollow.follow_forever(
                        self.host,
                        self.job.events_path,
                        self.offset + len(self._buf),
                        lambda b: self._parse(b, q.put_nowait),
                        stop,
                        on_error=self._link_error,
                        on_resume=self._link_ok,
                    )
                except Exception as e:  # noqa: BLE001 - a lost link whatever its kind: told, retried
                    attempt += 1
                    log.warning("%s: following %s failed: %r", self.host.target, self.job.events_path, e)
                    self._link_error(e, attempt)
                    await asyncio.sleep(1.0)

        async def watch() -> None:
            # the job's process is gone (finished, or killed without its exit event)
            attempt = 0
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), self.alive_every)
                    return
                except asyncio.TimeoutError:
                    pass
                try:
                    alive = await is_alive(self.host, self.job)
                except Exception as e:  # noqa: BLE001 - the check is retried; the follow reports the link
                    attempt += 1
                    log.info("%s: checking job %s: %r (attempt %d)", self.host.target, self.job.job_id, e, attempt)
                    continue
                if not alive:
                    await asyncio.sleep(1.0)  # let the follow read the last lines
                    q.put_nowait(_ENDED)
                    return

        tasks = [asyncio.create_task(follow()), asyncio.create_task(watch())]
        try:
            while True:
                ev = await q.get()
                if ev is _ENDED:
                    break
                if self._is_exit(ev):
                    return
                yield ev
            # the process is gone: stop following, hand over what the follow already parsed,
            # then read the rest of the file (from the consumed offset: nothing twice) and the rc
            stop.set()
            await cancel_and_wait(tasks, f"job {self.job.job_id}")
            pending: list[dict[str, Any]] = []
            while not q.empty():
                pending.append(q.get_nowait())
            self._buf.clear()
            rest = await self.final_read(lambda: logfollow.read_log(self.host, self.job.events_path, self.offset))
            if rest is not None:
                self._parse(rest, pending.append)
            for ev in pending:
                if ev is _ENDED:
                    continue
                if self._is_exit(ev):
                    return
                yield ev
            rc = await self.final_read(self._read_rc) if self.job.dir else None
            last = await self._last_log_line()
            self.exit = exit_record(
                rc,
                f"the {self.job.kind} job ended without a final report"
                f" (rc {rc if rc is not None else 'unknown'}" + (f"): {last}" if last else "; killed?)"),
                synthetic=True,
            )
        finally:
            stop.set()
            await cancel_and_wait(tasks, f"job {self.job}")

    def _is_exit(self, ev: Mapping[str, Any]) -> bool:
        """Whether ``ev`` is the job's exit event, the last of its events; it is kept as :attr:`exit`."""
        if ev.get("type") != "exit":
            return False
        self.exit = read_exit(ev)
        return True

    async def _read_rc(self) -> int | None:
        """The ``rc`` file's value; ``None`` when it is missing (killed); a lost link raises."""
        r = await self.host.run(["cat", "--", f"{self.job.dir}/rc"], timeout=15)
        if r.lost or r.timed_out:
            raise HostError("connection-lost" if r.lost else "timeout", f"reading {self.job.dir}/rc failed")
        s = r.stdout.strip()
        return int(s) if r.ok and s.lstrip("-").isdigit() else None

    async def final_read(self, read: Any, *, permanent: tuple[type[Exception], ...] = ()) -> Any:
        """``await read()``, retried with backoff over failing links for up to :data:`FINAL_READ_S`;
        an exception of a ``permanent`` type is no link's failure: raised at once."""
        deadline = time.monotonic() + FINAL_READ_S
        backoff = Backoff(0.5, 10.0)
        attempt = 0
        while True:
            try:
                got = await read()
            except permanent:
                raise
            except Exception as e:  # noqa: BLE001 - any failure of the link: told, retried
                attempt += 1
                self._link_error(e, attempt)
                if time.monotonic() >= deadline:
                    log.error("%s: job %s: giving up reading its outcome: %r", self.host.target, self.job.job_id, e)
                    self.lost = True
                    return None
                await asyncio.sleep(backoff.next())
            else:
                self._link_ok()
                return got

    async def _last_log_line(self) -> str:
        """The job's last stderr line (its own error when it died before reporting)."""
        try:
            r = await self.host.run(["tail", "-n", "5", "--", f"{self.job.dir}/log"], timeout=15)
        except Exception as e:  # noqa: BLE001 - a detail of the message; the link is told elsewhere
            log.info("%s: reading %s/log: %r", self.host.target, self.job.dir, e)
            return ""
        lines = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]
        return lines[-1][:300] if lines else ""


# ---------------------------------------------------------------------- mirror

_LIST_RESULTS = r"""cd "$1/data/results" 2>/dev/null || exit 0
for d in */; do
  d=${d%/}
  for f in meta.json samples.jsonl summary.json timeline.jsonl; do
    [ -f "$d/$f" ] && printf 'F\t%s\t%s\t%s\n' "$d" "$f" "$(wc -c < "$d/$f" | tr -d ' ')"
  done
done
exit 0
"""


async def mirror_results(host: Host, job: Job, *, only: set[str] | None = None) -> list[str]:
    """Copy the job's result folders into the local results store (incremental); returns the
    run ids mirrored. Samples are appended from the local file's size, complete lines only."""
    r = await host.run_script(_LIST_RESULTS, [job.dir], timeout=60)
    if r.lost or r.timed_out:
        raise HostError("connection-lost" if r.lost else "timeout", f"listing {job.dir} failed", target=host.target)
    files: dict[str, dict[str, int]] = {}
    for line in r.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[0] == "F" and parts[3].isdigit():
            files.setdefault(parts[1], {})[parts[2]] = int(parts[3])
    root = results_root()
    done = []
    for run_id, have in sorted(files.items()):
        if only is not None and run_id not in only:
            continue
        local = root / run_id
        local.mkdir(parents=True, exist_ok=True)
        remote = f"{job.dir}/{jobfiles.RESULTS}/{run_id}"
        for name in ("samples.jsonl", "timeline.jsonl"):  # append-only: copied from the local size on
            if name in have:
                await _append_samples(host, f"{remote}/{name}", local / name, have[name])
        for name in ("meta.json", "summary.json"):
            if name in have:
                text = (await logfollow.read_log(host, f"{remote}/{name}")).decode("utf-8", "replace")
                try:
                    json.loads(text)
                except ValueError:
                    log.warning("%s: %s/%s is not complete JSON yet; kept the local copy", host.target, remote, name)
                    continue
                if not (local / name).exists() or (local / name).read_text(encoding="utf-8") != text:
                    atomic_write_text(local / name, text)
        atomic_write_json(
            local / ORIGIN,
            {
                "target": host.target,
                "kind": job.kind,
                "job_id": job.job_id,
                "job_dir": job.dir,
                "mirrored": time.time(),
            },
        )
        done.append(run_id)
    return done


async def _append_samples(host: Host, remote: str, local: Path, remote_size: int) -> None:
    have = local.stat().st_size if local.exists() else 0
    if remote_size < have:
        log.warning(
            "%s: %s is shorter than the local copy (%d < %d bytes); not touched", host.target, remote, remote_size, have
        )
        return
    if remote_size == have:
        return
    data = await logfollow.read_log(host, remote, have)
    cut = data.rfind(b"\n")
    if cut < 0:
        return
    fd = os.open(local, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data[: cut + 1])
        os.fsync(fd)
    finally:
        os.close(fd)


def origin(run_dir: Path) -> dict[str, Any] | None:
    """Where a mirrored result came from (``None`` for a run measured here)."""
    try:
        v = json.loads((run_dir / ORIGIN).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return v if isinstance(v, dict) else None
