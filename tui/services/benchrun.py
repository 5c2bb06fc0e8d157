"""One way to run and follow a benchmark, wherever its client runs.

:class:`BenchRun` is what the ``bench`` command, the Bench screen and anything
else that shows a running benchmark use:

* ``where="host"`` (the default for a host): the client runs ON the host, detached,
  against the server's own loopback (:mod:`tunedeck.services.jobs`); it survives a lost
  link and tunedeck exiting, and :meth:`BenchRun.attach` follows it again later.
* ``where="local"``: the client runs in this process and reaches the server through
  the SSH port forward. Its numbers include the tunnel: results are marked
  ``client.where = "local-via-ssh"`` and shown as "measured through an SSH tunnel".

Both yield the same event dicts (``waiting``, ``start``, ``level_start``, ``tick``,
``sample``, ``level_done``, ``done``) from :meth:`BenchRun.events`; a host-side run also
yields a ``timeline`` event after each tick (the GPUs and the server in that second,
the level's ``timeline.jsonl`` line), read from the same followed file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, AsyncIterator, Mapping

from tunedeck.ab.sides import VIA_SSH
from tunedeck.bench.records import LevelSummaryRecord
from tunedeck.hostops import launcher
from tunedeck.hostops.hosts import Host
from tunedeck.hostside.jobfiles import ExitRecord, exit_record
from tunedeck.services import jobs
from tunedeck.util.retry import Backoff

log = logging.getLogger(__name__)

HOST = "host"
#: :attr:`BenchRun.outcome` values
COMPLETE, PARTIAL, LOST, FAILED = "complete", "partial", "lost", "failed"
TUNNEL_NOTE = "measured through an SSH tunnel"


def measured_through_tunnel(summary_or_meta: Mapping[str, Any]) -> bool:
    client = summary_or_meta.get("client")
    return isinstance(client, Mapping) and client.get("where") == VIA_SSH


def where_label(summary_or_meta: Mapping[str, Any]) -> str:
    """Where a result's client ran: ``host``, ``tunnel`` (through SSH) or ``local``."""
    client = summary_or_meta.get("client")
    where = client.get("where") if isinstance(client, Mapping) else None
    return {HOST: "host", VIA_SSH: "tunnel"}.get(str(where), "local")


class BenchRun:
    def __init__(self, host: Host, where: str, job: jobs.Job | None = None) -> None:
        self.host = host
        self.where = where
        self.job = job
        self.summaries: list[LevelSummaryRecord] = []
        self.exit: ExitRecord | None = None
        self.mirrored: list[str] = []
        #: the job's outcome could not be read from the host (see :attr:`outcome`)
        self.lost = False
        self._task: asyncio.Task[list[LevelSummaryRecord]] | None = None
        self._queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._follower: jobs.JobFollower | None = None
        #: callable(Exception, attempt): the link to the host failed (the job goes on there)
        self.on_link_error: Any = None
        #: callable(): the host answers again after :attr:`on_link_error`
        self.on_link_ok: Any = None

    # ------------------------------------------------------------------ start / attach
    @classmethod
    async def start(
        cls,
        host: Host,
        cfg: Any,
        *,
        meta_extra: Mapping[str, Any] | None = None,
        where: str = HOST,
        python: str | None = None,
        placed: bool = False,
    ) -> "BenchRun":
        """Start ``cfg`` (a :class:`tunedeck.bench.config.BenchConfig` whose URL is the server's
        loopback address on the host, ``http://127.0.0.1:PORT``). Its dataset file is read here and
        placed on the host, unless ``placed``: its path is already the host's (a campaign placed
        it there when it started: :meth:`tunedeck.services.deployops.DeploymentOps.place_dataset`)."""
        meta = dict(meta_extra or {})
        if where == HOST and cfg.workload.path and not placed:
            cfg = await _ship_workload_file(host, cfg, python)
        served = await launcher.serving_run(host, _port_of(cfg.url)) if _loopback(cfg.url) else None
        if served is not None and not meta.get("server"):
            # a server tunedeck launched: the result records its command, so Compare knows it
            meta["server"] = await launcher.server_of(host, served)
            if served.meta.get("profile") and not meta.get("profile"):
                meta["profile"] = served.meta["profile"]
        if cfg.api_key_file is None and served is not None:
            # a server launched with --api-key: the client reads the run's 0600 key file on the host
            key_file = launcher.api_key_file(served)
            if key_file is not None:
                meta["api_key"] = "the run's (sent as a bearer token; not stored)"
                if where == HOST:
                    cfg = dataclasses.replace(cfg, api_key_file=key_file)
                else:
                    cfg = dataclasses.replace(cfg, api_key_file=await _local_key_copy(host, key_file))
        if where == HOST:
            meta["client"] = {**dict(meta.get("client") or {}), "where": HOST, "via": "host loopback"}
            spec = {"config": dataclasses.asdict(cfg), "meta_extra": meta}
            job = await jobs.start(
                host,
                "bench",
                spec,
                python=python,
                meta={"label": cfg.label, "url": cfg.url, "profile": meta.get("profile")},
            )
            return cls(host, HOST, job)
        run = cls(host, VIA_SSH)
        port = _port_of(cfg.url)
        local = await host.forward_port(port)
        cfg = dataclasses.replace(cfg, url=f"http://127.0.0.1:{local}")
        meta["client"] = {**dict(meta.get("client") or {}), "via": "ssh-forward", "note": TUNNEL_NOTE}
        run._task = asyncio.create_task(run._local(cfg, meta))
        return run

    @classmethod
    async def attach(cls, host: Host, job_id: str) -> "BenchRun":
        job = await jobs.find(host, "bench", job_id)
        return cls(host, HOST, job)

    async def _local(self, cfg: Any, meta: Mapping[str, Any]) -> list[LevelSummaryRecord]:
        from tunedeck.bench.runner import run_benchmark

        try:
            return await run_benchmark(cfg, emit=self._queue.put_nowait, meta_extra=meta, client_where=VIA_SSH)
        finally:
            self._queue.put_nowait(None)

    # ------------------------------------------------------------------ follow
    @property
    def job_id(self) -> str | None:
        return self.job.job_id if self.job else None

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        if self.job is None:
            async for ev in self._local_events():
                yield ev
            return
        self._follower = jobs.JobFollower(self.host, self.job)
        self._follower.on_link_error = self.on_link_error
        self._follower.on_link_ok = self.on_link_ok
        async for ev in self._follower.events():
            if ev.get("type") == "level_done" and isinstance(ev.get("summary"), dict):
                self.summaries.append(ev["summary"])
                await self.mirror({str(ev.get("run_id"))})
            elif ev.get("type") == "level_start" and ev.get("run_id"):
                await self.mirror({str(ev["run_id"])})  # listed here as running on the host at once
            yield ev
        self.exit = self._follower.exit
        self.lost = self._follower.lost
        await self._final_mirror()
        # a partial level's summary is rebuilt from its samples (megabytes): not on the event loop
        self.summaries += await asyncio.to_thread(self._missing_summaries)

    async def _final_mirror(self) -> None:
        """Mirror every result folder of the job, retried over a failing link for up to
        :data:`jobs.FINAL_READ_S`: the outcome is what the host has, not what the events said."""
        deadline = asyncio.get_running_loop().time() + jobs.FINAL_READ_S
        backoff = Backoff(0.5, 10.0)
        while not await self.mirror(None):
            if asyncio.get_running_loop().time() >= deadline:
                log.error("bench job %s: its results could not be mirrored", self.job_id)
                self.lost = True
                return
            await asyncio.sleep(backoff.next())

    def _missing_summaries(self) -> list[LevelSummaryRecord]:
        """The summary of every mirrored level the events did not bring (a follow that missed its
        ``level_done``): read from the mirrored folder, rebuilt from its samples if partial."""
        from tunedeck.bench import store

        have = {s.get("run_id") for s in self.summaries}
        found: list[LevelSummaryRecord] = []
        for rid in sorted(self.mirrored):
            if rid in have:
                continue
            try:
                found.append(store.summary_for(rid))
            except (store.StoreError, OSError, ValueError) as e:
                log.warning("bench job %s: level %s has no readable result here: %s", self.job_id, rid, e)
        return found

    @property
    def outcome(self) -> str:
        """What became of the benchmark, from what the host has (see ``docs/exit-codes.md``):
        ``complete`` (exit 0 and every level's summary final), ``partial`` (results exist but the
        job did not finish every level, or ended without its final report), ``lost`` (nothing
        could be read), or ``failed`` (no result: the job's own error)."""
        ex = self.exit or {}
        rc = ex.get("rc")
        done = bool(self.summaries) and not any(s.get("partial") for s in self.summaries)
        if rc == 0 and done and not self.lost:
            return COMPLETE
        if self.summaries and any(s.get("completed") for s in self.summaries):
            return PARTIAL
        if self.lost or (ex.get("synthetic") and rc is None):
            return LOST
        return FAILED

    async def _local_events(self) -> AsyncIterator[dict[str, Any]]:
        assert self._task is not None
        while True:
            ev = await self._queue.get()
            if ev is None:
                break
            if ev.get("type") == "level_done" and isinstance(ev.get("summary"), dict):
                self.summaries.append(ev["summary"])
            yield ev
        try:
            await self._task
            self.exit = exit_record(0 if any(s.get("completed") for s in self.summaries) else 1, None)
        except asyncio.CancelledError:
            self.exit = exit_record(130, "stopped; finished samples were kept")
        except Exception as e:  # the CLI prints it as one line; the traceback goes to the log
            log.exception("local bench failed")
            self.exit = exit_record(1, f"{type(e).__name__}: {e}")

    async def mirror(self, only: set[str] | None = None) -> bool:
        """Copy the job's result folders here (incremental). Any failure is logged, not raised
        (the final mirror retries): returns whether it worked."""
        assert self.job is not None
        try:
            got = await jobs.mirror_results(self.host, self.job, only=only)
        except Exception as e:  # noqa: BLE001 - a link or a local disk failure; retried at the end
            log.warning("mirroring bench job %s: %r", self.job.job_id, e)
            return False
        for rid in got:
            if rid not in self.mirrored:
                self.mirrored.append(rid)
        return True

    # ------------------------------------------------------------------ stop
    async def stop(self) -> str:
        """Stop the benchmark (finished samples are kept, the summary is marked partial)."""
        if self.job is None:
            if self._task is not None:
                self._task.cancel()
            return "benchmark stopped"
        return await jobs.stop(self.host, self.job)


async def _ship_workload_file(host: Host, cfg: Any, python: str | None) -> Any:
    """``cfg`` with its dataset file placed on the host, so the host-side client reads it there."""
    on_host = await ship_data_file(host, cfg.workload.path, python)
    return dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, path=on_host))


def read_data_file(path: str) -> bytes:
    """A dataset file's bytes, read here; :class:`~tunedeck.bench.workloads.WorkloadError` naming it."""
    from tunedeck.bench.workloads import WorkloadError

    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise WorkloadError(f"{path}: cannot read it ({e.strerror or e})") from None


async def ship_data_file(host: Host, path: str, python: str | None) -> str:
    """A dataset file read here and placed on the host once per content
    (``${TUNEDECK_HOME}/data/<sha256>``); returns its path there. The file was checked here before
    (the CLI builds the workload before it starts anything)."""
    from tunedeck.services import runtime

    data = await asyncio.to_thread(read_data_file, path)  # a dataset can be hundreds of MB
    return await runtime.ensure_data(host, data, python=python)


def _loopback(url: str) -> bool:
    from urllib.parse import urlsplit

    return (urlsplit(url).hostname or "") in ("127.0.0.1", "localhost", "::1")


async def _local_key_copy(host: Host, key_file: str) -> str:
    """The key of a run on ``host`` copied for a client on this machine (through a port forward):
    a 0600 file in a 0700 folder of the state directory, replaced on every run."""
    import os

    from tunedeck.util.paths import state_dir

    r = await host.run(["cat", "--", key_file], timeout=20)
    if not r.ok:
        raise ValueError(f"{host.target}: the server's API key file {key_file} cannot be read: {r.stderr.strip()}")
    folder = state_dir() / "keys"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    path = folder / "bench-api-key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(r.stdout.strip() + "\n")
    return str(path)


def _port_of(url: str) -> int:
    from urllib.parse import urlsplit

    port = urlsplit(url).port
    if port is None:
        raise ValueError(f"{url}: no port")
    return port
