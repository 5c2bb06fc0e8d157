"""A benchmark run on the GPU host: ``spec.json`` in, events and results out.

The spec is ``{"config": {BenchConfig fields}, "meta_extra": {...}}``; the client
reaches the server on the host's own loopback, so what it measures is the
server, not the link to the laptop.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
from pathlib import Path
from typing import Any

from tui.hostside.jobfiles import EVENTS, EventLog, read_spec

log = logging.getLogger(__name__)

#: ``client.where`` of a result measured on the GPU host
WHERE = "host"


def config_from_spec(spec: dict[str, Any]) -> Any:
    from dataclasses import fields

    from tui.bench.runner import BenchConfig

    raw = spec.get("config")
    if not isinstance(raw, dict):
        raise ValueError("spec.json: 'config' must be an object")
    names = {f.name for f in fields(BenchConfig)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ValueError(f"spec.json: unknown bench settings {', '.join(unknown)} (a newer tunedeck?)")
    return BenchConfig(**raw)


async def run(job_dir: Path) -> int:
    from tui.bench.runner import NotReady, run_benchmark
    from tui.bench.store import StoreError

    events = EventLog(job_dir / EVENTS)
    rc, error = 0, None
    try:
        spec = read_spec(job_dir)
        cfg = config_from_spec(spec)
        meta_extra = spec.get("meta_extra") if isinstance(spec.get("meta_extra"), dict) else {}
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, task.cancel)

        def emit(msg: dict[str, Any]) -> None:
            events.write(msg)

        summaries = await run_benchmark(cfg, emit=emit, meta_extra=meta_extra, client_where=WHERE)
        events.check()
        if summaries and all(s.get("completed") == 0 for s in summaries):
            rc, error = 1, "no request completed"
    except asyncio.CancelledError:
        rc, error = 130, "stopped; finished samples were kept (summary marked partial)"
    except NotReady as e:
        rc, error = 3, f"NOT_READY: {e}"
    except (ValueError, StoreError) as e:
        rc, error = 2, str(e)
    except OSError as e:
        rc = 4
        what = "the host's disk is full" if e.errno == errno.ENOSPC else (e.strerror or str(e))
        error = f"{what} ({e.filename or 'results'}); samples written so far are kept"
    if error:
        log.error("bench job %s: %s", job_dir.name, error)
    events.write({"type": "exit", "rc": rc, "error": error})
    try:
        events.close()
    except OSError as e:
        log.error("bench job %s: events file: %s", job_dir.name, e)
        rc = rc or 4
    return rc
