"""``tunedeck ab A B``: launch A, benchmark, stop; launch B, benchmark, stop; compare."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import TYPE_CHECKING, Any, Callable

from tunedeck.ab.compare import DEFAULT_NOISE_PCT
from tunedeck.ab.plans import PlanError, load_plan
from tunedeck.ab.render import to_text
from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._ask import confirm
from tunedeck.commands._cli import add_noise_option, add_python_option, fail, target_label
from tunedeck.commands._jobfollow import add_follow_options, announce, cancel, follow_events
from tunedeck.util.safety import UnsafeInput, visible

if TYPE_CHECKING:
    from tunedeck.ab.events import ABEvent


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        subparsers,
        common,
        "ab",
        description="Runs ON the host, detached: stops what is running (asks first), then for A and for "
        "B: launch, wait ready, flush the prefix cache, run the plan's benchmarks next to the server, "
        "stop and confirm the GPU memory is freed; then prints the comparison. Ctrl-C or a lost link "
        "detaches (the A/B goes on; --attach follows it again); --cancel stops it. Every A/B is "
        "recorded in the tuning journal and its results are mirrored here.",
        epilog=EXIT_EPILOG,
    )
    p.add_argument("a", metavar="A", nargs="?", help="profile name for A (the baseline)")
    p.add_argument("b", metavar="B", nargs="?", help="profile name for B (the candidate)")
    add_follow_options(p, "an A/B")
    add_python_option(p, "the campaign (default: A's profile python, else python3)")
    p.add_argument(
        "--plan",
        default="default",
        metavar="NAME",
        help="benchmark plan: quick, default, sweep, a user plan or a .toml path (default: default)",
    )
    p.add_argument(
        "--workload",
        metavar="NAME",
        default=None,
        help="send this workload source with its defaults instead of the plan's (a --dataset-name of "
        "`tunedeck bench` that reads no file, e.g. shared_prefix, prefix_repetition, text; docs/workloads.md)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="N",
        help="run the plan N times per side for a mean and a noise band (default 1)",
    )
    p.add_argument(
        "--interleave",
        action="store_true",
        help="relaunch for every repeat, alternating A B A B (catches drift; costs a load each)",
    )
    add_noise_option(p)
    p.add_argument("--json", action="store_true", help="print the report (sides, comparison, journal id) as JSON")
    p.add_argument("--markdown", metavar="FILE", help="also write the comparison as Markdown")
    p.add_argument("--csv", metavar="FILE", help="also write the comparison as CSV")
    p.set_defaults(func=run)


def _progress_printer(quiet: bool, every: float = 5.0) -> Callable[[ABEvent], None]:
    """Event lines on stderr; startup/bench progress only when its shape changes or every few seconds."""
    last_key, last_t = [""], [0.0]

    def on_event(ev: ABEvent) -> None:
        if quiet:
            return
        if ev.kind in ("progress", "bench-progress"):
            key = ev.kind + re.sub(r"[\d.]+", "#", ev.message)
            if key == last_key[0] and ev.time - last_t[0] < every:
                return
            last_key[0], last_t[0] = key, ev.time
        # the message may carry host text (an engine's error, a diagnosis): never raw to the terminal
        print(f"[{ev.step}/{ev.steps}] {visible(ev.line())}", file=sys.stderr, flush=True)

    return on_event


def with_workload(plan: Any, name: str | None) -> Any:
    """``plan`` with ``--workload NAME`` (that source's defaults), its workload checked here (the file
    read, every level's requests built): ValueError with one line, before anything starts."""
    import dataclasses

    from tunedeck.bench.workloads import FILE_SOURCES, SOURCES, WorkloadSpec, build_workload, with_lengths

    if name is not None:
        if name not in SOURCES:
            raise ValueError(f"--workload {name!r}: expected one of {', '.join(SOURCES)}")
        if name in FILE_SOURCES:
            raise ValueError(f"--workload {name} needs a file: name it in a plan's [workload] table (path = FILE)")
        plan = dataclasses.replace(plan, workload=WorkloadSpec(name))
    token_ids = plan.endpoint != "chat"
    for lv in plan.levels:
        spec = with_lengths(plan.workload, lv.input_len, lv.output_len)
        try:
            build_workload(spec, lv.num_prompts, plan.seed, token_ids=token_ids)
        except ValueError as e:
            raise ValueError(f"plan {plan.name}, level {lv.title}: {e}") from None
    return plan


def _fail(msg: str, code: int = 2) -> int:
    return fail("ab", msg, code)


async def _ask(args: argparse.Namespace, question: str) -> bool:
    """``--yes``, or y at a terminal; no terminal and no --yes means no (Cancel is the default)."""
    return await confirm(question, prog="ab", yes=args.yes)


def _noise(args: argparse.Namespace) -> float | None:
    """``--noise``, or None for the default (the A/B's own)."""
    return args.noise if args.noise != DEFAULT_NOISE_PCT else None


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """How the command line runs an A/B, on one host or over two deployments: repeats, their
    order and the noise threshold (its settings), the simulator or the engine, the host's Python,
    and the question asked before a running server is stopped."""
    from tunedeck.services.abrun import ABSettings

    return {
        "settings": ABSettings(args.repeats, args.interleave, _noise(args)),
        "sim": args.sim,
        "confirm_stop": lambda q: _ask(args, q),
        "python": args.python,
    }


async def run(args: argparse.Namespace) -> int:
    if args.repeats < 1 or args.repeats > 100:
        return _fail("--repeats must be between 1 and 100")
    if not (0 <= args.noise <= 100):
        return _fail("--noise must be between 0 and 100")
    from tunedeck.hostops.hosts import HostError
    from tunedeck.services import jobs, runtime
    from tunedeck.services.abrun import ABRun
    from tunedeck.services.targets import get_host

    ref = args.attach or args.cancel
    if ref is None:
        from tunedeck.profiles.model import NAME_RE

        if not args.a or not args.b:
            return _fail("name two profiles (A B), or --attach/--cancel an A/B")
        for side, name in (("A", args.a), ("B", args.b)):
            if not NAME_RE.match(name):
                return _fail(f"{side}: invalid profile name {name!r} (letters, digits, '.', '_', '-'; at most 64)")
        try:
            plan = load_plan(args.plan)
        except PlanError as e:
            return _fail(f"plan {e}")
        try:
            plan = with_workload(plan, args.workload)
        except ValueError as e:
            return _fail(str(e))
    if ref is None and _multi_node(args.a, args.b):
        return await _deployments(args, plan)
    try:
        host = get_host(args.host, demo=args.demo)
    except (UnsafeInput, HostError) as e:
        return _fail(str(e))
    label = target_label(args.demo, args.host)
    try:
        if ref is not None:
            ab = await ABRun.attach(host, ref, noise_pct=_noise(args))
            if args.cancel and not await cancel(ab, cmd="ab", noun="A/B", label=label, yes=args.yes):
                return 1
        else:
            ab = await ABRun.start(host, args.a, args.b, plan, demo=args.demo, host_label=label, **_options(args))
            announce(ab, cmd="ab", subject=f"A/B job {ab.id}", where=f"on {label}", quiet=args.quiet)
        return await _follow(args, ab, label)
    except ValueError as e:  # a profile that cannot be used: exit 1, as everywhere else
        return _fail(str(e), 1)
    except (jobs.JobError, runtime.RuntimeUnavailable) as e:
        return _fail(str(e), 1)
    except HostError as e:
        return _fail(f"{label}: {e}", 1)
    finally:
        await host.close()


def _multi_node(*names: str) -> bool:
    """Whether a side names several nodes (an unreadable profile is reported by the A/B itself)."""
    from tunedeck.profiles.model import ProfileError
    from tunedeck.profiles.store import ProfileStore

    store = ProfileStore()
    for name in names:
        try:
            if len(store.get(name).nodes) > 1:
                return True
        except ProfileError:
            continue
    return False


async def _deployments(args: argparse.Namespace, plan: Any) -> int:
    """An A/B of two multi-node profiles: the campaign runs detached on this machine (only it
    reaches every node); each side is a deployment, each benchmark runs on the side's head node."""
    from tunedeck.hostops.hosts import HostError
    from tunedeck.services import deployab, jobs
    from tunedeck.services.abrun import ABRun

    if args.demo or args.host not in (None, "local"):
        return _fail("multi-node profiles name their nodes; drop --host/--demo (use --sim for the simulator)")
    try:
        host, job = await deployab.start(args.a, args.b, plan, **_options(args))
    except ValueError as e:
        return _fail(str(e), 1)
    except (jobs.JobError, HostError) as e:
        return _fail(str(e), 1)
    ab = ABRun(host, job, noise_pct=_noise(args))
    label = str((job.meta or {}).get("host_label") or "this machine")
    announce(
        ab,
        cmd="ab",
        subject=f"A/B job {ab.id} of two deployments",
        where="detached on this machine (it reaches every node; each benchmark runs on the head node)",
        quiet=args.quiet,
    )
    try:
        return await _follow(args, ab, label)
    finally:
        await host.close()


async def _follow(args: argparse.Namespace, ab: Any, label: str) -> int:
    if not await follow_events(ab, cmd="ab", noun="A/B", label=label, quiet=args.quiet):
        return 130
    rep = ab.report
    code = exit_code(ab)
    if code == EXIT_LOST:
        return _fail(
            f"A/B {ab.id}: its report could not be read from {label}; it is kept there: "
            f"`tunedeck ab --attach {ab.id}` reads it (exit {EXIT_LOST})",
            EXIT_LOST,
        )
    if rep is None:
        err = (ab.exit or {}).get("error") or "the A/B ended without a report"
        return _fail(f"A/B {ab.id}: {err}", EXIT_FAILED)
    if args.json:
        print(json.dumps({**rep.to_dict(), "job_id": ab.id}, indent=2, ensure_ascii=False))
    else:
        if rep.comparison is not None:
            sys.stdout.write(to_text(rep.comparison))
        for w in rep.warnings:
            print(f"warning: {w}")
        if rep.status != "completed":
            for side in (rep.sides.get("A"), rep.sides.get("B")):
                if side is not None:
                    got = ", ".join(f"C={c}" for c in side.concurrencies())
                    print(f"{side.name}: {'results at ' + got if got else 'no result'}")
        again = f"; `tunedeck compare {rep.id}` shows it again" if rep.comparison is not None else ""
        print(f"journal: A/B {rep.id} ({rep.status}){again}")
    if rep.comparison is not None and (args.markdown or args.csv):
        from tunedeck.commands.compare import write_export

        write_export(rep.comparison, args)
    if rep.left_running:
        print("tunedeck ab: still running after the A/B: " + "; ".join(rep.left_running), file=sys.stderr)
    if code == EXIT_OK:
        return code
    print(f"tunedeck ab: {rep.status}: {rep.error} (exit {code})", file=sys.stderr)
    return code


#: exit statuses of ``tunedeck ab`` (docs/exit-codes.md), the numbers ``tunedeck bench`` uses
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PARTIAL, EXIT_LOST, EXIT_STOPPED = 0, 1, 2, 5, 6, 130
EXIT_EPILOG = (
    "exit status: 0 the A/B completed; 1 it failed (e.g. a side did not start; the results it has are "
    "reported) or left no result; 2 bad usage; 5 partial (the A/B job ended without its report, e.g. "
    "killed: the levels its job folder holds, or an A/B of deployments' results here and on its head nodes, "
    "are reported, compared when both sides have some, and "
    "written by --json with status partial); 6 lost (its outcome could not be read from the host: it "
    "is kept there, --attach ID reads it); 130 detached or cancelled. See docs/exit-codes.md."
)


def exit_code(ab: Any) -> int:
    """The exit status of a followed A/B, from what the host has: its report, or the report
    rebuilt from its job folder (:meth:`tunedeck.services.abrun.ABRun.finish`)."""
    rep = ab.report
    if rep is None:
        return EXIT_LOST if ab.lost else EXIT_FAILED
    return {"completed": EXIT_OK, "cancelled": EXIT_STOPPED, "partial": EXIT_PARTIAL}.get(rep.status, EXIT_FAILED)
