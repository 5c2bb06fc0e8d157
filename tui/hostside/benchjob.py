"""A benchmark run on the GPU host: ``spec.json`` in, events and results out.

The spec is ``{"config": {BenchConfig fields}, "meta_extra": {...}}``; the client
reaches the server on the host's own loopback, so what it measures is the
server, not the link to the laptop. Each level's result folder also gets
``timeline.jsonl``: the GPUs and the server second by second (:mod:`tunedeck.hostside.timeline`);
each of its lines also goes into the events, right after its tick, as a ``timeline``
event (``level``, ``run_id``, ``row``), so a follower draws it live.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from pathlib import Path
from typing import Any

from tunedeck.hostside.jobfiles import EVENTS, EventLog, exit_record, on_stop_signal, read_spec
from tunedeck.hostside.timeline import Timeline

log = logging.getLogger(__name__)

#: ``client.where`` of a result measured on the GPU host
WHERE = "host"


def config_from_spec(spec: dict[str, Any]) -> Any:
    from dataclasses import fields

    from tunedeck.bench.config import BenchConfig

    raw = spec.get("config")
    if not isinstance(raw, dict):
        raise ValueError("spec.json: 'config' must be an object")
    names = {f.name for f in fields(BenchConfig)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ValueError(f"spec.json: unknown bench settings {', '.join(unknown)} (a newer tunedeck?)")
    return BenchConfig(**raw)


#: room kept on the host's disk for the last words of a run (partial summary, exit event, rc)
RESERVE_BYTES = 256 * 1024
#: below this much free space the run stops before a write fails
LOW_WATER_BYTES = 128 * 1024


def _free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _disk_full_message(job_dir: Path) -> str:
    return (
        f"the host's disk is full ({job_dir}: {_free_bytes(job_dir) // 1024} kB free); stopped, "
        "samples written so far are kept"
    )


async def run(job_dir: Path) -> int:
    from tunedeck.bench.config import NotReady
    from tunedeck.bench.runner import run_benchmark
    from tunedeck.bench.store import StoreError

    events = EventLog(job_dir / EVENTS)
    reserve = job_dir / ".reserve"
    rc, error = 0, None
    disk_full = False
    task = asyncio.current_task()
    assert task is not None

    def release_reserve() -> None:
        try:
            reserve.unlink()
        except FileNotFoundError:
            pass

    async def watch_disk() -> None:
        nonlocal disk_full
        while True:
            await asyncio.sleep(0.5)
            if _free_bytes(job_dir) < LOW_WATER_BYTES or events.failed:
                disk_full = True
                release_reserve()
                task.cancel()
                return

    watcher: asyncio.Task[None] | None = None
    try:
        with open(reserve, "wb") as f:
            f.write(b"\0" * RESERVE_BYTES)
            f.flush()
            os.fsync(f.fileno())
        spec = read_spec(job_dir)
        cfg = config_from_spec(spec)
        meta_extra = spec.get("meta_extra") if isinstance(spec.get("meta_extra"), dict) else {}
        on_stop_signal(task.cancel)  # finished samples are kept, the summary marked partial
        watcher = asyncio.ensure_future(watch_disk())
        timeline = Timeline(cfg.url, smi=os.environ.get("TUNEDECK_NVIDIA_SMI", "nvidia-smi"))

        def emit(msg: dict[str, Any]) -> None:
            line = timeline.on_event(msg)  # first: a level's summary gets its validity findings
            events.write(msg)
            if line is not None:  # the second's GPU and server figures, for a follower's live charts
                events.write({"type": "timeline", "level": msg.get("level"), "run_id": timeline.run_id, "row": line})

        try:
            await timeline.start()
            await timeline.check_start()  # the GPUs before the first request (validity)
            summaries = await run_benchmark(cfg, emit=emit, meta_extra=meta_extra, client_where=WHERE)
        finally:
            await timeline.stop()
        events.check()
        if summaries and all(s.get("completed") == 0 for s in summaries):
            rc, error = 1, "no request completed"
    except asyncio.CancelledError:
        if disk_full:
            rc, error = 4, _disk_full_message(job_dir)
        else:
            rc, error = 130, "stopped; finished samples were kept (summary marked partial)"
    except NotReady as e:
        rc, error = 3, f"NOT_READY: {e}"
    except StoreError as e:
        release_reserve()
        if "No space left" in str(e):
            rc, error = 4, _disk_full_message(job_dir)
        else:
            rc, error = 2, str(e)
    except ValueError as e:
        rc, error = 2, str(e)
    except OSError as e:
        release_reserve()
        rc = 4
        error = (
            _disk_full_message(job_dir)
            if e.errno == errno.ENOSPC
            else f"{e.strerror or e} ({e.filename or job_dir}); samples written so far are kept"
        )
    finally:
        if watcher is not None:
            watcher.cancel()
        release_reserve()
    if error:
        log.error("bench job %s: %s", job_dir.name, error)
    events.write(exit_record(rc, error))
    try:
        events.close()
    except OSError as e:
        log.error("bench job %s: events file: %s", job_dir.name, e)
        rc = rc or 4
    return rc
