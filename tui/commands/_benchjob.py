"""A benchmark on ``--host``/``--demo`` from the command line: started next to the server (or
attached to, or stopped), followed here with a lost link told and survived, and the exit status
its outcome gives (``EXIT_*``, docs/exit-codes.md, in the words every view uses)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Any

from tunedeck.bench.plan import BenchPlan
from tunedeck.commands._benchout import fail, printer, write_json

log = logging.getLogger(__name__)

#: exit statuses of ``tunedeck bench`` (docs/exit-codes.md)
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_READY, EXIT_DISK_FULL = 0, 1, 2, 3, 4
EXIT_PARTIAL, EXIT_LOST, EXIT_STOPPED = 5, 6, 130
EXIT_EPILOG = (
    "exit status: 0 complete (every level finished, results written and mirrored); 1 failed (no "
    "request completed, or the job's own error); 2 bad usage or spec; 3 NOT_READY (the server never "
    "answered); 4 the host's disk is full (samples so far kept); 5 partial (the job ended before "
    "every level finished, e.g. killed: the results it left are reported and written by --json); "
    "6 lost (the job's outcome could not be read from the host: nothing is reported as done, "
    "--attach ID reads it later); 130 stopped or detached (Ctrl-C). See docs/exit-codes.md."
)


#: what an exit status says, in the words every view uses (the Bench and Compare screens too)
OUTCOME_WORDS = {
    EXIT_OK: "finished",
    EXIT_STOPPED: "interrupted (partial results saved)",
    EXIT_PARTIAL: "partial results (read from the job folder)",
    EXIT_LOST: "outcome unknown: the host could not be read; the job and its results are kept there",
}


def outcome_words(code: int | None) -> str:
    """The words for exit status ``code`` (:data:`OUTCOME_WORDS`; otherwise ``failed (exit N)``)."""
    return OUTCOME_WORDS.get(code if code is not None else -1, f"failed (exit {code})")


def exit_code(run: Any) -> int:
    """The exit status for a followed benchmark, from what the host has (:attr:`BenchRun.outcome`)."""
    from tunedeck.services.benchrun import COMPLETE, LOST, PARTIAL

    ex = run.exit or {}
    rc = ex.get("rc")
    outcome = run.outcome
    if outcome == COMPLETE:
        return EXIT_OK
    if outcome == LOST:
        return EXIT_LOST
    if rc in (EXIT_USAGE, EXIT_NOT_READY, EXIT_DISK_FULL, EXIT_STOPPED):  # the job said why
        return int(rc)
    if outcome == PARTIAL:
        return EXIT_PARTIAL
    return rc if isinstance(rc, int) and rc else EXIT_FAILED


async def host_gpus(host: Any) -> list[str]:
    from tunedeck.hostops.hosts import HostError

    try:
        r = await host.run(["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader"], timeout=10)
    except HostError as e:
        log.info("GPU names not recorded: %s", e)
        return []
    return [ln.strip() for ln in r.stdout.splitlines() if ln.strip()] if r.ok else []


async def host_run(
    plan: BenchPlan, new: tuple[Any, dict[str, Any]] | None, *, attach: str | None = None, stop: str | None = None
) -> int:
    """A benchmark on the plan's --host/--demo: start it (``new``: its config and what its result
    records), or attach to job ``attach``, or stop job ``stop``; and follow it here."""
    from tunedeck.hostops.hosts import HostError
    from tunedeck.services import jobs, runtime
    from tunedeck.services.benchrun import HOST, BenchRun
    from tunedeck.services.targets import get_host
    from tunedeck.util.safety import UnsafeInput

    try:
        host = get_host(plan.host, demo=plan.demo)
    except (UnsafeInput, HostError) as e:
        return fail(str(e))
    target = plan.target
    try:
        if stop:
            run = await BenchRun.attach(host, stop)
            print(await run.stop(), file=sys.stderr)
            await run.mirror()
            return 0
        if attach:
            run = await BenchRun.attach(host, attach)
            if not run.job or not run.job.alive:
                print(f"tunedeck bench: job {run.job_id} has ended; its results are mirrored here", file=sys.stderr)
        else:
            assert new is not None
            cfg, meta_extra = new
            gpus = await host_gpus(host)
            if gpus:
                meta_extra.setdefault("gpus", gpus)
            where = plan.client_where or "host"
            run = await BenchRun.start(
                host, cfg, meta_extra=meta_extra, where=HOST if where == "host" else "local", python=plan.python
            )
        if run.job is not None and run.job.alive:
            print(
                f"tunedeck bench: job {run.job_id} runs on {target} next to the server; Ctrl-C detaches "
                f"(it goes on); follow it with `tunedeck bench --attach {run.job_id}`, stop it with "
                f"`--stop {run.job_id}`",
                file=sys.stderr,
                flush=True,
            )
        return await _follow(plan, run)
    except (jobs.JobError, runtime.RuntimeUnavailable, ValueError) as e:
        return fail(str(e), 1)
    except HostError as e:
        return fail(f"{target}: {e}", 1)
    finally:
        await host.close()


async def _follow(plan: BenchPlan, run: Any) -> int:
    emit, shown = printer(plan)
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    detached = False

    def on_signal() -> None:
        nonlocal detached
        detached = True
        task.cancel()

    def on_link(e: Exception, attempt: int) -> None:
        print(
            f"tunedeck bench: link to the host lost ({e}); the benchmark goes on there, reconnecting "
            f"(attempt {attempt})",
            file=sys.stderr,
            flush=True,
        )

    def on_link_ok() -> None:
        print("tunedeck bench: link to the host is back; following the benchmark again", file=sys.stderr, flush=True)

    run.on_link_error = on_link
    run.on_link_ok = on_link_ok
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, on_signal)
    try:
        async for ev in run.events():
            emit(ev)
    except asyncio.CancelledError:
        if run.job is None:
            await run.stop()
            print("tunedeck bench: interrupted; finished samples were saved (summary marked partial)", file=sys.stderr)
            return 130
        print(
            f"tunedeck bench: detached; job {run.job_id} goes on; `tunedeck bench --attach {run.job_id}` "
            "follows it again",
            file=sys.stderr,
        )
        return 130 if detached else 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
    ex = run.exit or {}
    for s in run.summaries:  # levels whose report the events did not bring, read from the host's folder
        if s.get("run_id") not in shown:
            emit({"type": "level_done", "run_id": s.get("run_id"), "summary": s, "from": "job folder"})
    rc = write_json(plan, run.summaries)
    code = exit_code(run)
    if ex.get("error") and code != EXIT_OK:
        kind = "NOT_READY: " if ex.get("rc") == 3 and not str(ex["error"]).startswith("NOT_READY") else ""
        if plan.progress and ex.get("rc") == 3:
            emit({"type": "error", "kind": "NOT_READY", "message": ex["error"]})
        print(f"tunedeck bench: {kind}{ex['error']}", file=sys.stderr)
    if code == EXIT_PARTIAL:
        print(
            f"tunedeck bench: partial: {len(run.summaries)} level(s) reported, read from the job folder "
            f"(exit {EXIT_PARTIAL})",
            file=sys.stderr,
        )
    elif code == EXIT_LOST:
        print(
            f"tunedeck bench: the outcome of job {run.job_id} could not be read from the host; it is kept "
            f"there: `tunedeck bench --attach {run.job_id}` reads it (exit {EXIT_LOST})",
            file=sys.stderr,
        )
    return code or rc
