"""``tunedeck tune BASE --vary KEY=V1,V2 … --slo TERM…``: which configuration serves the most
users within the SLO (a tuning campaign, detached on the host like an A/B)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Awaitable, Callable, Mapping, NoReturn, Sequence

from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._ask import confirm
from tunedeck.commands._cli import add_noise_option, add_python_option, fail, target_label
from tunedeck.commands._jobfollow import add_follow_options, announce, cancel, follow_events
from tunedeck.util.safety import UnsafeInput

#: exit statuses (docs/exit-codes.md): the A/B's, and 3 for a campaign where no candidate met the SLO
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_WINNER, EXIT_PARTIAL, EXIT_LOST, EXIT_STOPPED = 0, 1, 2, 3, 5, 6, 130
EXIT_EPILOG = (
    "exit status: 0 the campaign completed with a winner; 1 it failed; 2 bad usage (nothing started); "
    "3 it completed but no candidate met the SLO (the closest is named); 5 partial (its process ended "
    "without its report more often than the follow restarts it: the candidates its job folder holds are "
    "ranked, those not measured named, written by --json with status partial; --attach ID resumes it); "
    "6 lost (its outcome could not be read from the host; --attach ID reads it); 130 detached or "
    "cancelled. See docs/exit-codes.md."
)


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    from tunedeck.ab.tune import DEFAULT_NOISE_PCT
    from tunedeck.commands._argtypes import pos_int
    from tunedeck.commands._workload import add_endpoint_option, add_warmup_option, add_workload_options

    p = add_command(
        subparsers,
        common,
        "tune",
        description="Runs ON the host, detached, like an A/B: every candidate (the base profile with "
        "the --vary keys changed, their Cartesian product, or a --candidates file) is pre-flighted "
        "before anything is stopped, then launched, measured (the highest concurrency that meets the "
        "SLO, and the single-user speed) and stopped; leaders within the noise band get repeats, "
        "clear losers are dropped. A killed campaign process is restarted and resumes. Prints the "
        "ranking, the Pareto frontier and the winner's changes against the base. A multi-node BASE "
        "(a profile with nodes) runs detached on this machine instead, as an A/B of deployments does: "
        "each candidate a deployment on the base's nodes, each benchmark on the head node.",
        epilog=EXIT_EPILOG,
    )
    p.add_argument("base", metavar="BASE", nargs="?", help="the base profile (itself a candidate)")
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="a TOML path of the profile and the values to try, e.g. flags.attention-backend=fa3,triton "
        "(repeat for a Cartesian product); over a multi-node base also deploy.mode, deploy.pp, deploy.dp",
    )
    p.add_argument("--candidates", metavar="FILE", help="a TOML file of [[candidate]] tables (name, changes)")
    p.add_argument(
        "--slo",
        nargs="+",
        default=[],
        metavar="TERM",
        help="METRIC:BOUND terms: ttft_p50|p90|p99, tpot_p50|p90|p99, itl_p90|p99, e2el_p90|p99 (ms, at "
        "most) and per_user_tok_s (at least), e.g. --slo ttft_p90:500 tpot_p90:50",
    )
    p.add_argument("--budget", metavar="TIME", help="refuse a campaign that cannot fit (e.g. 2h, 90m); bounds repeats")
    p.add_argument(
        "--repeats-max", type=int, default=2, metavar="N", help="measurements at most per candidate (default 2)"
    )
    add_noise_option(p, DEFAULT_NOISE_PCT, "the least noise band of a capacity")
    p.add_argument("--max-concurrency", type=pos_int, default=1024, metavar="C", help="search no higher (default 1024)")
    p.add_argument("--max-steps", type=pos_int, default=8, metavar="N", help="levels per search (default 8)")
    p.add_argument(
        "--start",
        type=pos_int,
        default=1,
        metavar="C",
        help="after C=1, bracket from this concurrency by doubling (default: 2)",
    )
    w = p.add_argument_group("workload (each level of the search)")
    w.add_argument("--input-len", type=pos_int, default=None, help="prompt length in tokens (default 128)")
    w.add_argument("--output-len", type=pos_int, default=None, help="max_tokens per request (default 128)")
    w.add_argument(
        "--prompts-per-c", type=pos_int, default=5, metavar="N", help="requests per level: N x C (default 5)"
    )
    w.add_argument(
        "--min-prompts", type=pos_int, default=10, metavar="N", help="requests per level at least (default 10)"
    )
    add_warmup_option(w)
    add_endpoint_option(w)
    w.add_argument("--seed", type=int, default=1)
    add_workload_options(p)
    add_follow_options(p, "a campaign")
    p.add_argument("--list", action="store_true", help="list the campaigns on --host/--demo")
    add_python_option(p, "the campaign")
    p.add_argument("--json", metavar="FILE", help="write the campaign's result as JSON to FILE")
    p.set_defaults(func=run)


def _fail(msg: str, code: int = EXIT_USAGE) -> int:
    return fail("tune", msg, code)


def _workload(args: argparse.Namespace) -> Any:
    """The level template of every search step (ValueError with one line)."""
    from tunedeck.ab.plan import Plan, PlanLevel
    from tunedeck.ab.tune import Workload
    from tunedeck.bench.workloads import build_workload, default_ignore_eos, with_lengths
    from tunedeck.commands._workload import workload_from_args

    spec = workload_from_args(args)
    ignore_eos = args.ignore_eos if getattr(args, "ignore_eos", None) is not None else default_ignore_eos(spec.name)
    level = PlanLevel(1, args.min_prompts, args.input_len or 128, args.output_len or 128, args.warmup, "C=1")
    plan = Plan("tune", (level,), endpoint=args.endpoint, ignore_eos=ignore_eos, seed=args.seed, workload=spec)
    try:
        build_workload(
            with_lengths(spec, level.input_len, level.output_len),
            args.min_prompts,
            args.seed,
            token_ids=args.endpoint != "chat",
        )
    except ValueError as e:
        raise ValueError(f"workload: {e}") from None
    return Workload(plan, args.prompts_per_c, args.min_prompts)


def _usage(args: argparse.Namespace) -> tuple[Any, list[Any], list[str], Any, float | None] | str:
    """What a new campaign needs, checked before the host is contacted; a str is the one line
    that refuses it."""
    from tunedeck.ab.capacity import parse_slo
    from tunedeck.profiles.model import ProfileError
    from tunedeck.profiles.store import ProfileStore
    from tunedeck.profiles.vary import VaryError, expand, parse_vary, read_candidates_file
    from tunedeck.services.tunerun import parse_budget

    if not args.base:
        return "name the base profile (tune BASE --vary KEY=V1,V2 --slo TERM…), or --attach/--cancel ID, or --list"
    if not args.vary and not args.candidates:
        return "the candidate set is empty: give --vary KEY=V1,V2 (one or more) or --candidates FILE"
    if args.vary and args.candidates:
        return "give --vary or --candidates, not both"
    if not args.slo:
        return "give the SLO: --slo ttft_p90:MS tpot_p90:MS and/or per_user_tok_s:N"
    if not 1 <= args.repeats_max <= 20:
        return "--repeats-max must be between 1 and 20"
    if not 0 < args.noise <= 100:
        return "--noise must be more than 0 and at most 100"
    try:
        slo = [str(t) for t in parse_slo(args.slo)]
        budget = parse_budget(args.budget) if args.budget else None
        workload = _workload(args)
    except ValueError as e:
        return str(e)
    try:
        base = ProfileStore().get(args.base)
    except ProfileError as e:
        return f"BASE: {e}"
    if base.multi_node and (args.demo or args.host not in (None, "local")):
        return (
            f"BASE {base.name} names its nodes ({', '.join(base.nodes)}); drop --host/--demo "
            "(--sim runs the simulator on them)"
        )
    try:
        vary = parse_vary(args.vary)
        listed = read_candidates_file(args.candidates) if args.candidates else []
        cands = expand(base, vary, listed)
    except VaryError as e:
        return str(e)
    return base, cands, slo, workload, budget


async def run(args: argparse.Namespace) -> int:
    from tunedeck.hostops.hosts import HostError
    from tunedeck.services import jobs, runtime
    from tunedeck.services.targets import get_host
    from tunedeck.services.tunerun import TuneRun

    ref = args.attach or args.cancel
    plan: Any = None
    if ref is None and not args.list:
        got = plan_of(args)
        if isinstance(got, str):
            return _fail(got)
        plan = got
    #: a multi-node base: the campaign runs here, where every node is reached (an A/B of deployments' way)
    here = plan is not None and plan[0].multi_node
    try:
        host = get_host(None if here else args.host, demo=args.demo)
    except (UnsafeInput, HostError) as e:
        return _fail(str(e))
    label = "this machine" if here else target_label(args.demo, args.host)
    try:
        if args.list:
            return await _list(host)
        if ref is not None:
            tr = await TuneRun.attach(host, ref)
            if args.cancel and not await cancel(tr, cmd="tune", noun="campaign", label=label, yes=args.yes):
                return EXIT_FAILED
        else:

            def on_skip(name: str, why: str) -> None:
                print(f"tunedeck tune: {name}: skipped: {why}", file=sys.stderr, flush=True)

            tr = await start_campaign(
                host, args, plan, confirm_stop=lambda q: confirm(q, prog="tune", yes=args.yes), on_skip=on_skip
            )
            cands, est = plan[1], plan[5]
            where = f"{label} (it reaches every node; the levels run on the head)" if here else label
            announce(
                tr,
                cmd="tune",
                subject=f"campaign job {tr.id}",
                where=f"on {where}: {len(cands)} candidates, estimated {est.text}",
                quiet=args.quiet,
            )
        return await _follow(args, tr, label)
    except (jobs.JobError, runtime.RuntimeUnavailable) as e:
        return _fail(str(e), EXIT_FAILED)
    except HostError as e:
        return _fail(f"{label}: {e}", EXIT_FAILED)
    finally:
        await host.close()


async def start_campaign(
    host: Any,
    args: argparse.Namespace,
    plan: tuple[Any, ...],
    *,
    confirm_stop: Callable[[str], Awaitable[bool]] | None,
    on_skip: Callable[[str, str], None] | None = None,
) -> Any:
    """Start the campaign that ``args`` (parsed ``tune`` options) and ``plan`` (:func:`plan_of`)
    describe on ``host``; a :class:`~tunedeck.services.tunerun.TuneRun`. A multi-node base's campaign
    runs on this machine instead, which reaches every node (:mod:`tunedeck.services.deploytune`). The
    command line and the dashboard's Tune screen both start campaigns here."""
    from tunedeck.services.tunerun import CampaignSettings, TuneRun

    base, cands, slo, workload, budget, est = plan
    settings = CampaignSettings(
        repeats_max=args.repeats_max,
        noise_pct=args.noise,
        budget_s=budget,
        estimate_s=est.total_s,
        pace=est.pace,
        max_concurrency=args.max_concurrency,
        max_steps=args.max_steps,
        start=args.start,
    )
    if base.multi_node:
        from tunedeck.services import deploytune

        return await deploytune.start(
            base.name,
            cands,
            slo,
            workload,
            settings,
            sim=args.sim,
            confirm_stop=confirm_stop,
            python=args.python,
            on_skip=on_skip,
        )
    return await TuneRun.start(
        host,
        base.name,
        cands,
        slo,
        workload,
        settings,
        demo=args.demo,
        sim=args.sim,
        confirm_stop=confirm_stop,
        python=args.python,
        host_label=target_label(args.demo, args.host),
        on_skip=on_skip,
    )


async def check_campaign(host: Any, args: argparse.Namespace, plan: tuple[Any, ...]) -> list[tuple[Any, Any, Any]]:
    """(candidate, what will run, why it is skipped or None) for each candidate of the campaign
    ``plan`` describes, as its start would pre-flight it (on ``host``, or on a multi-node base's
    nodes); nothing stops. The Tune screen's pre-flight."""
    base, cands = plan[0], plan[1]
    if base.multi_node:
        from tunedeck.services import deploytune

        return list(await deploytune.check_candidates(cands, sim=args.sim))
    from tunedeck.services.tunerun import check_candidates

    return list(await check_candidates(host, cands, demo=args.demo, sim=args.sim))


def plan_of(args: argparse.Namespace) -> tuple[Any, ...] | str:
    """(base, candidates, slo, workload, budget, estimate) of a new campaign, checked before the
    host is contacted; a str is the one line that refuses it (a budget it cannot fit included)."""
    from tunedeck.services.tunerun import estimate

    got = _usage(args)
    if isinstance(got, str):
        return got
    base, cands, slo, workload, budget = got
    est = estimate(
        [c.name for c in cands],
        base.name,
        max_steps=args.max_steps,
        sim=args.sim or args.demo,
        workload=workload,
        slo=slo,
        start=args.start,
    )
    if budget is not None and est.total_s > budget:
        from tunedeck.fmt import eta

        return f"--budget {args.budget} ({eta(budget)}) cannot fit this campaign: estimated {est.text}; nothing started"
    return base, cands, slo, workload, budget, est


def command_argv(
    base: str,
    *,
    vary: Sequence[str] = (),
    slo: Sequence[str] = (),
    budget: str | None = None,
    dataset: str | None = None,
    dataset_path: str | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    host: str | None = None,
    demo: bool = False,
    sim: bool = False,
) -> list[str]:
    """The ``tunedeck tune …`` command line of a campaign (what the Tune screen shows and then
    runs through :func:`parse_command`); empty values are left out."""
    argv = ["tunedeck", "tune", base]
    for v in vary:
        argv += ["--vary", v]
    if slo:
        argv += ["--slo", *slo]
    if budget:
        argv += ["--budget", budget]
    if dataset and dataset != "random":
        argv += ["--dataset-name", dataset]
    if dataset_path:
        argv += ["--dataset-path", dataset_path]
    if input_len is not None:
        argv += ["--input-len", str(input_len)]
    if output_len is not None:
        argv += ["--output-len", str(output_len)]
    if demo:
        argv.append("--demo")
    elif host:
        argv += ["--host", host]
    if sim and not demo:
        argv.append("--sim")
    return argv


def candidates_file(base: str) -> Any:
    """Where the dashboard writes the candidates of a campaign over ``base`` made from marked
    profiles (``--candidates FILE`` of the command it shows)."""
    from tunedeck.util.paths import state_dir
    from tunedeck.util.safety import visible

    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in visible(base))
    return state_dir() / "tune" / f"candidates-{safe}.toml"


def write_candidates_file(base: str, marked: Sequence[str], path: str) -> None:
    """The marked profiles as a candidates file over ``base`` (each its changes to the base's
    TOML): :class:`~tunedeck.profiles.vary.VaryError` (a ValueError) naming a profile that cannot be
    one, OSError when it cannot be written."""
    from tunedeck.profiles.model import ProfileError
    from tunedeck.profiles.store import ProfileStore
    from tunedeck.profiles.vary import VaryError, candidates_toml, changes_between
    from tunedeck.util.files import atomic_write_text

    store = ProfileStore()
    try:
        b = store.get(base)
        items = [(name, changes_between(b, store.get(name))) for name in marked]
    except ProfileError as e:
        raise VaryError(f"marked profile: {e}") from None
    from pathlib import Path

    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(dest, candidates_toml(items))


class _Refused(argparse.ArgumentParser):
    """A parser whose errors are a :class:`ValueError` (one line) instead of an exit."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def parse_command(argv: Sequence[str]) -> argparse.Namespace:
    """``tunedeck tune …`` parsed as the command line parses it (ValueError with one line)."""
    from tunedeck.commands import common_parser, finish_args

    words = list(argv)
    if words[:2] != ["tunedeck", "tune"]:
        raise ValueError(f"not a `tunedeck tune` command: {' '.join(words[:2])}")
    parser = _Refused(prog="tunedeck", parents=[common_parser()], add_help=False)
    sub: Subparsers = parser.add_subparsers(dest="command", parser_class=_Refused)
    register(sub, common_parser())
    return finish_args(parser.parse_args(words[1:]))


async def _list(host: Any) -> int:
    from tunedeck.fmt import text_table
    from tunedeck.services import jobs

    rows = []
    for j in await jobs.list_jobs(host, "tune"):
        m = j.meta or {}
        state = "running" if j.alive else (f"ended rc {j.rc}" if j.rc is not None else "ended")
        rows.append((j.job_id, str(m.get("campaign") or ""), str(m.get("base") or ""), state))
    if not rows:
        print("no tuning campaign on this host")
        return EXIT_OK
    print("\n".join(text_table(("job", "campaign", "base", "state"), rows)))
    return EXIT_OK


async def _follow(args: argparse.Namespace, tr: Any, label: str) -> int:
    if not await follow_events(tr, cmd="tune", noun="campaign", label=label, quiet=args.quiet):
        return EXIT_STOPPED
    rep = tr.report
    if rep is None:
        if tr.lost:
            return _fail(
                f"campaign {tr.id}: its report could not be read from {label}; `tunedeck tune --attach {tr.id}` reads it",
                EXIT_LOST,
            )
        err = (tr.exit or {}).get("error") or "the campaign ended without a report"
        return _fail(f"campaign {tr.id}: {err}", EXIT_FAILED)
    if args.json:
        from pathlib import Path

        from tunedeck.util.files import atomic_write_json

        try:
            atomic_write_json(Path(args.json), {**rep, "job_id": tr.id})
        except OSError as e:
            print(f"tunedeck tune: cannot write {args.json}: {e.strerror or e}", file=sys.stderr)
    sys.stdout.write(render(rep))
    if rep.get("left_running"):
        print("tunedeck tune: still running after the campaign: " + "; ".join(rep["left_running"]), file=sys.stderr)
    if rep.get("status") == "cancelled":
        return _fail(f"cancelled: {rep.get('error')} (exit {EXIT_STOPPED})", EXIT_STOPPED)
    if rep.get("status") == "partial":
        return _fail(f"partial: {rep.get('error')} (exit {EXIT_PARTIAL})", EXIT_PARTIAL)
    if rep.get("status") != "completed":
        return _fail(f"{rep.get('status')}: {rep.get('error')} (exit {EXIT_FAILED})", EXIT_FAILED)
    return EXIT_OK if rep.get("winner") else EXIT_NO_WINNER


def _num(v: Any, spec: str = ".1f") -> str:
    return format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def render(rep: Mapping[str, Any]) -> str:
    """The campaign as text: the ranking table (``*`` marks the Pareto frontier of tok/s per user
    against tok/s per GPU), the findings, the winner and its changes against the base."""
    from tunedeck.fmt import text_table
    from tunedeck.util.safety import visible

    cands = list(rep.get("candidates") or [])
    cands.sort(key=lambda c: (c.get("rank") is None, c.get("rank") or 0))
    rows = []
    for c in cands:
        band = c.get("noise_band_pct")
        rows.append(
            (
                str(c.get("rank") or "-"),
                ("*" if c.get("pareto") else " ") + visible(str(c.get("name"))),
                str(c.get("state")),
                _num(c.get("capacity"), "d") if isinstance(c.get("capacity"), int) else "-",
                _num(c.get("single_user_tok_s")),
                _num(c.get("tok_s_per_gpu")),
                _num(c.get("startup_s")),
                f"±{band:.0f}%" if isinstance(band, (int, float)) else "-",
                str(len(c.get("findings") or [])),
            )
        )
    out = [
        f"campaign {rep.get('campaign')} on {rep.get('host')}: SLO {' '.join(rep.get('slo') or [])} ({rep.get('status')})"
    ]
    out += text_table(
        ("#", " candidate", "state", "capacity", "1-user tok/s", "tok/s/GPU", "start-up s", "noise", "findings"),
        rows,
        right=(0, 3, 4, 5, 6, 7, 8),
        rule=True,
    )
    out.append("* the Pareto frontier: no other candidate has both more tok/s per user and more tok/s per GPU")
    for c in cands:
        for f in c.get("findings") or []:
            out.append(f"  {visible(str(c.get('name')))}: {visible(str(f))}")
    for w in rep.get("warnings") or []:
        out.append(f"warning: {visible(str(w))}")
    win = rep.get("winner")
    partial = rep.get("status") == "partial"
    todo = [visible(str(n)) for n in rep.get("not_measured") or ()]
    if partial:
        out.append(
            "partial: the campaign ended without its report; this is what its job folder holds"
            + (f" (not measured: {', '.join(todo)})" if todo else "")
        )
    if win:
        wc: Mapping[str, Any] = next((c for c in cands if c.get("name") == win), {})
        what = "best of the measured" if partial else "winner"
        out.append(f"{what}: {visible(str(win))} (capacity C={wc.get('capacity')} within the SLO)")
        for d in rep.get("winner_diff") or []:
            out.append(f"  {visible(str(d.get('text')))}")
        if win == rep.get("base"):
            out.append(f"  (the base itself: no {'measured ' if partial else ''}change beats it)")
    else:
        cl = rep.get("closest")
        near = (
            f"; closest: {visible(str(cl['name']))} at C={cl['concurrency']} ({visible('; '.join(cl['reasons']))})"
            if cl
            else ""
        )
        out.append(f"no {'measured ' if partial else ''}candidate met the SLO{near}")
    out.append(f"journal: campaign {rep.get('campaign')} ({rep.get('status')})")
    return "\n".join(out) + "\n"
