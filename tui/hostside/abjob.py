"""An A/B campaign run on the GPU host: stop -> launch A -> ready -> flush -> warmup -> plan ->
stop -> the same for B -> compare, driven here so that it survives the laptop.

The spec: ``{"ab_id", "a": ProfileInfo, "b": ProfileInfo, "plan": Plan, "repeats",
"interleave", "noise_pct", "stop_existing", "host_label"}``. The laptop asked the
user before sending ``stop_existing: true``. Secrets in the profiles' env are read
once and the spec is rewritten with them redacted. Only one campaign runs on a
host at a time (``${TUNEDECK_HOME}/ab/.lock``). SIGTERM cancels: the server this
campaign started is stopped, every result is kept.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Optional, Tuple

from tunedeck.ab.ops import ProfileInfo, ServerOps
from tunedeck.hostside.jobfiles import EVENTS, REPORT, SPEC, EventLog, exit_record, on_stop_signal, read_spec
from tunedeck.util.files import atomic_write_json
from tunedeck.util.safety import redact_argv, redact_env

log = logging.getLogger(__name__)

LOCK = ".lock"


class Busy(Exception):
    """Another campaign holds the host."""


def take_lock(ab_root: Path) -> int:
    fd = os.open(ab_root / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Busy("another A/B or tuning campaign is running on this host; attach to it or cancel it first") from None
    return fd


def local_ops(spec: Mapping[str, Any], infos: Mapping[str, ProfileInfo]) -> ServerOps:
    """The campaign's operations on this host (the launcher, tracker and benchmark engine here)."""
    from tunedeck.hostside.abops import LocalOps

    return LocalOps({i.name: i for i in infos.values()}, host_label=str(spec.get("host_label") or "local"))


async def run_job(
    job_dir: Path, lock_root: Path, what: str, body: Callable[[EventLog], Awaitable[Tuple[str, Optional[str]]]]
) -> int:
    """The frame of a campaign job (an A/B or a tuning campaign) in ``job_dir``: the host's one
    campaign lock (under ``lock_root``), its events file, and its exit status. ``body(events)``
    runs the campaign, writes its report and returns the report's status and error; the frame turns
    that, or what ``body`` raised, into the exit code and the final ``exit`` event: 0 completed,
    130 cancelled, 1 failed, 2 a bad spec, 4 a file error, 5 another campaign holds the host."""
    events = EventLog(job_dir / EVENTS)
    rc, error = 0, None
    lock = -1
    try:
        lock_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = take_lock(lock_root)
        status, err = await body(events)
        events.check()
        if status != "completed":
            rc, error = (130 if status == "cancelled" else 1), err or status
    except asyncio.CancelledError:
        rc, error = 130, "cancelled before the campaign could report"
    except Busy as e:
        rc, error = 5, str(e)
    except (KeyError, TypeError, ValueError) as e:
        rc, error = 2, f"spec.json: {type(e).__name__}: {e}"
    except OSError as e:
        rc, error = 4, f"{e.strerror or e} ({e.filename or job_dir})"
    finally:
        if lock >= 0:
            os.close(lock)
    if error:
        log.error("%s job %s: %s", what, job_dir.name, error)
    events.write(exit_record(rc, error))
    try:
        events.close()
    except OSError as e:
        log.error("%s job %s: events file: %s", what, job_dir.name, e)
        rc = rc or 4
    return rc


async def run(
    job_dir: Path, make_ops: Callable[[Mapping[str, Any], Mapping[str, ProfileInfo]], ServerOps] = local_ops
) -> int:
    """Run the campaign in ``job_dir`` (its spec.json), writing events and the report there.
    ``make_ops`` gives the runner its operations (a multi-node deployment's come from the laptop)."""
    from tunedeck.ab.events import ABEvent
    from tunedeck.ab.plan import Plan
    from tunedeck.ab.runner import ABRunner

    async def body(events: EventLog) -> Tuple[str, Optional[str]]:
        spec = read_spec(job_dir)
        infos = {k: ProfileInfo.from_json(spec[k]) for k in ("a", "b")}
        redacted = dict(spec)
        for k in ("a", "b"):
            side = spec[k]
            redacted[k] = {
                **side,
                "env": redact_env(side.get("env") or {}),
                "argv": redact_argv(side.get("argv") or ()),
            }
        atomic_write_json(job_dir / SPEC, redacted, mode=0o600)
        plan = Plan.from_dict(spec["plan"])
        ops = make_ops(spec, infos)
        stop_existing = bool(spec.get("stop_existing"))

        async def confirm(_question: str) -> bool:
            return stop_existing

        def on_event(ev: ABEvent) -> None:
            events.write(ev.to_json())

        runner = ABRunner(
            ops,
            infos["a"].name,
            infos["b"].name,
            plan,
            repeats=int(spec.get("repeats") or 1),
            interleave=bool(spec.get("interleave")),
            confirm_stop=confirm,
            on_event=on_event,
            noise_pct=spec.get("noise_pct") if isinstance(spec.get("noise_pct"), (int, float)) else None,
            ab_id=str(spec["ab_id"]),
        )
        on_stop_signal(runner.cancel)  # the server this campaign started is stopped, results kept
        rep = await runner.run()
        report: dict[str, Any] = rep.to_dict()
        atomic_write_json(job_dir / REPORT, report)
        return rep.status, rep.error

    return await run_job(job_dir, job_dir.parent, "A/B", body)
