"""A tuning campaign run on the GPU host (:mod:`tunedeck.ab.tune`), driven here so that it survives
the laptop; the same job folder layout, lock and operations as an A/B (:mod:`tunedeck.hostside.abjob`).

The spec: ``{"campaign", "base", "candidates": [{"name", "changes", "info": ProfileInfo or null,
"tp", "skip": reason or null}], "slo": [TERM…], "workload": Workload, "repeats_max",
"noise_pct", "budget_s", "estimate_s", "pace" (the estimate's parts, ``tunedeck.ab.tuneeta.Pace``,
or null), "max_concurrency", "max_steps", "stop_existing", "host_label"}``. The laptop asked
the user before sending ``stop_existing: true``. A campaign over a multi-node base runs this
same job on the laptop (:mod:`tunedeck.services.deploytune`, its own ``make_ops``), each candidate's
``profile`` in the spec until the campaign ends.

After every candidate (and when one starts) the runner's state is written to ``state.json``
(atomic replace). Started again in the same folder (the laptop's attach does it when the process
was killed), the job resumes from that state: finished measurements kept, the interrupted one
redone, the server the killed process left stopped first. The profiles' secrets stay in the
spec (0600, in the job's 0700 folder) until the campaign ends, since a resume needs them; the
spec is then rewritten with them redacted. One campaign (tune or A/B) per host: the A/B's lock.
SIGTERM cancels: the server this campaign started is stopped, every result is kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from tunedeck.ab.ops import ProfileInfo, ServerOps
from tunedeck.hostside.abjob import run_job
from tunedeck.hostside.jobfiles import REPORT, SPEC, EventLog, on_stop_signal, read_spec
from tunedeck.util.files import atomic_write_json
from tunedeck.util.safety import redact_argv, redact_env

STATE = "state.json"


def local_ops(spec: Mapping[str, Any], infos: Mapping[str, ProfileInfo]) -> ServerOps:
    from tunedeck.hostside.abops import LocalOps

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
        # a campaign of deployments keeps each candidate's profile for a resume: no longer needed
        cands.append({k: v for k, v in {**c, "info": info}.items() if k != "profile"})
    out["candidates"] = cands
    return out


async def run(
    job_dir: Path, make_ops: Callable[[Mapping[str, Any], Mapping[str, ProfileInfo]], ServerOps] = local_ops
) -> int:
    """Run (or resume) the campaign in ``job_dir``; events, state and report are written there."""
    from tunedeck.ab.tune import TuneRunner

    async def body(events: EventLog) -> Tuple[str, Optional[str]]:
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
        return str(rep["status"]), rep.get("error")

    # the A/B's lock: one campaign of either kind per host
    return await run_job(job_dir, job_dir.parent.parent / "ab", "tune", body)
