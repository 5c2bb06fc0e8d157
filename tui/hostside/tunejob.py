"""A tuning campaign run on the GPU host (:mod:`tui.ab.tune`), driven here so that it survives
the laptop; the same job folder layout, lock and operations as an A/B (:mod:`tui.hostside.abjob`).

The spec: ``{"campaign", "base", "candidates": [{"name", "changes", "info": ProfileInfo or null,
"tp", "skip": reason or null}], "slo": [TERM…], "workload": Workload, "repeats_max",
"noise_pct", "budget_s", "estimate_s", "max_concurrency", "max_steps", "stop_existing",
"host_label"}``. The laptop asked the user before sending ``stop_existing: true``.

After every candidate (and when one starts) the runner's state is written to ``state.json``
(atomic replace). Started again in the same folder (the laptop's attach does it when the process
was killed), the job resumes from that state: finished measurements kept, the interrupted one
redone, the server the killed process left stopped first. The profiles' secrets stay in the
spec (0600, in the job's 0700 folder) until the campaign ends, since a resume needs them; the
spec is then rewritten with them redacted. One campaign (tune or A/B) per host: the A/B's lock.
SIGTERM cancels: the server this campaign started is stopped, every result is kept.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Dict, Mapping

from tui.ab.runner import ProfileInfo, ServerOps
from tui.hostside.abjob import Busy, take_lock
from tui.hostside.jobfiles import EVENTS, REPORT, SPEC, EventLog, on_stop_signal, read_spec
from tui.util.files import atomic_write_json
from tui.util.safety import redact_argv, redact_env

log = logging.getLogger(__name__)

STATE = "state.json"


def local_ops(spec: Mapping[str, Any], infos: Mapping[str, ProfileInfo]) -> ServerOps:
    from tui.hostside.abops import LocalOps

    return LocalOps(dict(infos), host_label=str(spec.get("host_label") or "local"))


def read_state(job_dir: Path) -> Dict[str, Any] | None:
    """The state a previous run of this job left (None: a first start)."""
    try:
        st = json.loads((job_dir / STATE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"{job_dir / STATE}: unreadable ({e})") from None
    if not isinstance(st, dict) or not isinstance(st.get("candidates"), list):
        raise ValueError(f"{job_dir / STATE}: not a campaign state")
    return st


def redacted_spec(spec: Mapping[str, Any]) -> Dict[str, Any]:
    out = dict(spec)
    cands = []
    for c in spec.get("candidates") or []:
        info = c.get("info")
        if isinstance(info, Mapping):
            info = {**info, "env": redact_env(info.get("env") or {}), "argv": redact_argv(info.get("argv") or ())}
        cands.append({**c, "info": info})
    out["candidates"] = cands
    return out


async def run(
    job_dir: Path, make_ops: Callable[[Mapping[str, Any], Mapping[str, ProfileInfo]], ServerOps] = local_ops
) -> int:
    """Run (or resume) the campaign in ``job_dir``; events, state and report are written there."""
    from tui.ab.tune import TuneRunner

    events = EventLog(job_dir / EVENTS)
    rc, error = 0, None
    lock = -1
    try:
        ab_root = job_dir.parent.parent / "ab"  # the A/B's lock: one campaign of either kind per host
        ab_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = take_lock(ab_root)
        spec = read_spec(job_dir)
        state = read_state(job_dir)
        infos = {
            str(c["name"]): ProfileInfo.from_json(c["info"])
            for c in spec["candidates"]
            if isinstance(c.get("info"), dict)
        }
        ops = make_ops(spec, infos)

        def save(st: Dict[str, Any]) -> None:
            atomic_write_json(job_dir / STATE, st, mode=0o600)

        runner = TuneRunner(ops, spec, state=state, on_event=lambda ev: events.write(ev.to_json()), on_state=save)
        on_stop_signal(runner.cancel)  # the server this campaign started is stopped, results kept
        rep = await runner.run()
        atomic_write_json(job_dir / REPORT, rep)
        atomic_write_json(job_dir / SPEC, redacted_spec(spec), mode=0o600)
        events.check()
        if rep["status"] != "completed":
            rc, error = (130 if rep["status"] == "cancelled" else 1), rep.get("error") or rep["status"]
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
        log.error("tune job %s: %s", job_dir.name, error)
    events.write({"type": "exit", "rc": rc, "error": error})
    try:
        events.close()
    except OSError as e:
        log.error("tune job %s: events file: %s", job_dir.name, e)
        rc = rc or 4
    return rc
