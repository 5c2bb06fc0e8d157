"""``tunedeck bench``: a streaming serving benchmark comparable with ``vllm bench serve``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from tunedeck.bench.plan import BenchPlan
from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._argtypes import (
    int_list,
    nonneg_float,
    percentiles,
    port,
    pos_float,
    pos_int,
    rate_list,
)
from tunedeck.commands._benchjob import EXIT_EPILOG, host_gpus, host_run
from tunedeck.commands._benchout import fail, printer, write_json, write_json_data
from tunedeck.commands._capacity import add_capacity_options, search_capacity
from tunedeck.commands._cli import add_python_option
from tunedeck.commands._workload import (
    add_endpoint_option,
    add_warmup_option,
    add_workload_options,
    check_workload,
    dataset_file,
    level_workloads,
    plan_workload,
    workload_options,
)


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        subparsers,
        common,
        "bench",
        description="Benchmark an OpenAI-compatible server: TTFT, TPOT, ITL, E2EL, throughput, goodput, "
        "as `vllm bench serve` defines them. Every finished request is saved under the results store.",
        epilog=EXIT_EPILOG,
    )
    g = p.add_argument_group("server")
    g.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:8000")
    g.add_argument(
        "--port",
        type=port,
        help="server port on --host/--demo (the client runs next to it; with --client-where local, "
        "through a port forward)",
    )
    g.add_argument(
        "--deployment",
        metavar="ID",
        default=None,
        help="a multi-node deployment (id or prefix, see `tunedeck runs --deployments`): the benchmark "
        "runs on its head node against the port the head serves; the result records the deployment",
    )
    g.add_argument("--model", help="model name (default: the first one /v1/models lists)")
    add_endpoint_option(g)
    g.add_argument(
        "--ready-timeout",
        type=pos_float,
        default=120.0,
        metavar="S",
        help="seconds to wait for the server to answer /v1/models (default 120)",
    )
    w = p.add_argument_group("workload")
    w.add_argument(
        "--concurrency",
        type=int_list,
        default=None,
        metavar="C[,C...]",
        help="max concurrency; a list sweeps (default 1 with an infinite rate)",
    )
    w.add_argument(
        "--request-rate",
        type=rate_list,
        default=None,
        metavar="R[,R...]",
        help="requests/s (Gamma arrivals; 'inf' = all at once, gated by --concurrency); a list sweeps",
    )
    w.add_argument("--burstiness", type=pos_float, default=1.0, help="Gamma shape (1 = Poisson)")
    w.add_argument("--num-prompts", type=pos_int, default=None, help="requests per level (default 5 x C, >= 10)")
    w.add_argument(
        "--input-len",
        "--random-input-len",
        dest="input_len",
        type=pos_int,
        default=None,
        help="prompt length in tokens (default 128, where vLLM's --random-input-len is 1024; completions: "
        "exactly, as token ids; chat: fitted with the server's /tokenize where it has one); also the text "
        "and conversation sources' length",
    )
    w.add_argument(
        "--output-len",
        "--random-output-len",
        dest="output_len",
        type=pos_int,
        default=None,
        help="max_tokens per request (default 128); also the text and conversation sources' length",
    )
    add_warmup_option(w)
    w.add_argument(
        "--ignore-eos",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send ignore_eos so every request generates its full output length (default: on, except "
        "for sharegpt and custom, whose prompts have real answers of their own length)",
    )
    add_workload_options(p)
    w.add_argument("--temperature", type=nonneg_float, default=0.0, help="sampling temperature (default 0)")
    w.add_argument("--seed", type=int, default=0)
    m = p.add_argument_group("metrics")
    m.add_argument(
        "--goodput",
        nargs="+",
        default=[],
        metavar="KEY:MS",
        help="SLOs for goodput: ttft:MS tpot:MS e2el:MS as vLLM, and itl:MS (tunedeck's: the "
        "largest gap between a request's output events)",
    )
    m.add_argument(
        "--metric-percentiles",
        type=percentiles,
        default=[90.0, 99.0],
        metavar="P[,P...]",
        help="percentiles to report (default 90,99)",
    )
    add_capacity_options(p)
    c = p.add_argument_group("client")
    c.add_argument("--workers", type=pos_int, default=1, help="client processes (when one core is not enough)")
    c.add_argument(
        "--no-preconnect",
        dest="preconnect",
        action="store_false",
        help="open connections during the timed phase instead of before it",
    )
    c.add_argument(
        "--read-timeout",
        type=pos_float,
        default=600.0,
        metavar="S",
        help="largest gap allowed between two reads of a response (default 600)",
    )
    c.add_argument(
        "--request-timeout", type=pos_float, default=None, metavar="S", help="per-request deadline (default none)"
    )
    c.add_argument(
        "--client-where",
        choices=("host", "local"),
        default=None,
        help="with --host/--demo: run the client on the host next to the server (default; it "
        "survives a lost link), or here through an SSH port forward ('local': the numbers "
        "include the tunnel and are marked so)",
    )
    add_python_option(c, "the host-side client (default: python3 on its PATH)")
    j = p.add_argument_group("host-side runs")
    for flag, text in (
        ("--attach", "follow a benchmark running on --host/--demo again (its results are mirrored here)"),
        ("--stop", "stop a benchmark running on --host/--demo (finished samples are kept)"),
    ):
        j.add_argument(flag, metavar="ID", default=None, help=text)
    o = p.add_argument_group("output")
    o.add_argument("--label", default=None)
    o.add_argument("--profile", default=None, help="profile name to record with the run")
    o.add_argument(
        "--meta-json",
        default=None,
        metavar="FILE",
        help="JSON object merged into meta.json (server argv/env, gpus, ...; secrets redacted)",
    )
    o.add_argument(
        "--progress",
        action="store_true",
        help="JSON progress lines on stdout (one per second); the result block goes to stderr",
    )
    o.add_argument("--progress-samples", action="store_true", help="with --progress: one line per request too")
    o.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="OUT",
        help="write the summary JSON to OUT ('-' or no value: stdout)",
    )
    o.add_argument(
        "--preview",
        action="store_true",
        help="show what each level would send (lengths, their histogram, the prefix-sharing ratio) and exit: "
        "no server is needed and nothing is sent (with --json: as JSON)",
    )
    p.set_defaults(func=run_bench)


def _check_url(url: str) -> None:
    """The URL as the benchmark's client will read it (scheme, host, port); ValueError naming it."""
    from tunedeck.bench.httpcore import InvalidURL, split_url

    try:
        split_url(url)
    except InvalidURL as e:
        raise ValueError(f"--url {e}") from None


def check_plan(plan: BenchPlan) -> None:
    """ValueError with one line naming what in ``plan`` cannot run: options that do not go
    together, the URL, the SLO of ``--capacity``, a source option given for another source."""
    plan.check()
    if plan.capacity:
        plan_slo(plan)
    if plan.url:
        _check_url(plan.url)
    plan_workload(plan)


def plan_slo(plan: BenchPlan) -> Any:
    """The SLO terms of ``--capacity --slo`` (:func:`tunedeck.ab.capacity.parse_slo`); ValueError with one line."""
    from tunedeck.ab.capacity import parse_slo

    try:
        return parse_slo(list(plan.slo))
    except ValueError as e:
        raise ValueError(f"--slo: {e}") from None


#: the plan's fields that are not the parsed value of the option of their name
_CONVERTED = ("dataset_path", "workload_options", "concurrency", "request_rate", "goodput", "percentiles", "slo")


def plan_from_args(args: argparse.Namespace) -> BenchPlan:
    """The :class:`BenchPlan` of the parsed ``tunedeck bench`` options; ValueError with one line
    (:func:`check_plan`)."""
    from tunedeck.bench import metrics

    # every other field is the value of the option of its name, as its parser gave it
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(BenchPlan) if f.name not in _CONVERTED}
    plan = BenchPlan(
        **given,
        dataset_path=dataset_file(args.dataset_path),
        workload_options=workload_options(args),
        concurrency=tuple(args.concurrency or ()),
        request_rate=tuple(args.request_rate or ()),
        goodput=tuple(metrics.parse_goodput(args.goodput).items()),
        percentiles=tuple(args.metric_percentiles),
        slo=tuple(args.slo),
    )
    for f in dataclasses.fields(plan):  # argparse reads ``--label=--`` as no value at all: a list
        if isinstance(getattr(plan, f.name), list):
            raise ValueError(f"{f.metadata['flag']}=--: '--' ends the options; it cannot be a value")
    check_plan(plan)
    return plan


def parse_plan(argv: list[str]) -> BenchPlan:
    """The :class:`BenchPlan` of a ``tunedeck bench`` argument list, as the command line reads it."""
    return plan_from_args(parse_args(argv))


#: the settings a :class:`BenchConfig` takes as the plan holds them (same name, same value)
_AS_IS = (
    "model",
    "endpoint",
    "num_prompts",
    "burstiness",
    "warmup",
    "temperature",
    "seed",
    "read_timeout",
    "ready_timeout",
    "workers",
    "preconnect",
    "label",
)


def plan_config(plan: BenchPlan, url: str) -> Any:
    """The :class:`BenchConfig` of ``plan`` against ``url``, every level's requests built here (files
    read and checked); ValueError naming a bad workload option or file."""
    from tunedeck.bench.config import BenchConfig
    from tunedeck.bench.workloads import default_ignore_eos

    workload = plan_workload(plan)
    same = {name: getattr(plan, name) for name in _AS_IS}
    cfg = BenchConfig(
        url=url,
        **same,
        input_len=plan.input_len or 128,
        output_len=plan.output_len or 128,
        concurrency=plan.concurrency_levels(),
        request_rate=plan.rate_levels(),
        ignore_eos=plan.ignore_eos if plan.ignore_eos is not None else default_ignore_eos(workload.name),
        goodput=plan.goodput_ms(),
        percentiles=list(plan.percentiles),
        request_deadline=plan.request_timeout,
        progress_samples=plan.progress and plan.progress_samples,
        workload=workload,
    )
    cfg.validate()
    check_workload(cfg)
    return cfg


def use_deployment(plan: BenchPlan) -> tuple[BenchPlan, dict[str, Any]]:
    """``plan`` pointed at its deployment's head node and serving port (``--deployment ID``), and what
    the result records of it; ValueError, naming the deployment, when it cannot be benchmarked."""
    if not plan.deployment:
        return plan, {}
    from tunedeck.hostops.runstore import FAILED, STOPPED
    from tunedeck.services.deploy import DeploymentStore  # with its parser: ~70 ms a start that needs none

    if plan.url or plan.demo or plan.host is not None:
        raise ValueError("--deployment names the host and port itself; drop --url/--host/--demo")
    rec = DeploymentStore().find(plan.deployment)
    if rec is None:
        raise ValueError(f"--deployment {plan.deployment}: no such deployment here (see `tunedeck runs --deployments`)")
    if rec.status in (STOPPED, FAILED):
        raise ValueError(f"deployment {rec.deploy_id} ({rec.profile}) is {rec.status}; launch it again first")
    if plan.port is not None and plan.port != rec.http_port:
        raise ValueError(f"deployment {rec.deploy_id} serves on port {rec.http_port}, not --port {plan.port}")
    plan = dataclasses.replace(plan, host=rec.head, port=rec.http_port, profile=plan.profile or rec.profile)
    return plan, {"deployment": rec.result_meta()}


def _target(plan: BenchPlan) -> tuple[Any, dict[str, Any]]:
    """The :class:`BenchConfig` of a plan whose target is checked here, and what its result records
    of the server's place (``target``, ``server_port``; nothing for ``--url``)."""
    plan.check_target()
    if plan.url:
        return plan_config(plan, plan.url), {}
    cfg = plan_config(plan, f"http://127.0.0.1:{plan.port}")
    return cfg, {"target": plan.target, "server_port": plan.port}


def _recorded(plan: BenchPlan, deployment: dict[str, Any]) -> dict[str, Any]:
    """What the result records of the deployment and the profile."""
    return {**deployment, **({"profile": plan.profile} if plan.profile else {})}


async def run_bench(args: argparse.Namespace) -> int:
    if args.attach or args.stop:
        if args.deployment:
            return fail("--attach/--stop take a job id with --host; --deployment starts a new benchmark")
        if args.url:
            return fail("--attach/--stop name a benchmark on --host/--demo, not on --url")
    try:
        plan = plan_from_args(args)
    except ValueError as e:
        return fail(str(e))
    if args.attach or args.stop:
        return await host_run(plan, None, attach=args.attach, stop=args.stop)
    return await run_plan(plan)


async def run_plan(plan: BenchPlan) -> int:
    """``tunedeck bench`` of a checked plan: its preview, or the run here (``--url``) or on its host."""
    try:
        plan, deployment = use_deployment(plan)
    except ValueError as e:
        return fail(str(e))
    if plan.preview:
        return _print_preview(plan)
    meta_extra: dict[str, Any] = {}
    if plan.meta_json is not None:
        try:
            meta_extra = json.loads(Path(plan.meta_json).read_text())
            if not isinstance(meta_extra, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:
            return fail(f"--meta-json {plan.meta_json}: {e}")
    meta_extra.update(_recorded(plan, deployment))
    try:
        cfg, where = _target(plan)
    except ValueError as e:
        return fail(str(e))
    meta_extra = {**where, **meta_extra}
    if plan.url:
        return await _local_run(plan, cfg, meta_extra, plan_slo(plan) if plan.capacity else None)
    return await host_run(plan, (cfg, meta_extra))


def level_previews(plan: BenchPlan) -> list[tuple[str, Any]]:
    """(level label, :class:`~tunedeck.bench.workloads.preview.WorkloadPreview`) of every level
    ``plan`` asks for, built exactly as the run would build them (files read and checked here);
    ValueError (a WorkloadError among them) with one line naming the option, file or record."""
    from tunedeck.bench.workloads.preview import preview

    url = plan.url or f"http://127.0.0.1:{plan.port or 8000}"  # not contacted: the run's URL rules apply
    cfg = plan_config(plan, url)
    built = {n: preview(w) for n, w in level_workloads(cfg)}
    out: list[tuple[str, Any]] = []
    for c, rate in cfg.levels():
        label = f"C={c}" if c is not None else "unbounded"
        if math.isfinite(rate):
            label += f", {rate:g} req/s"
        out.append((label, built[cfg.prompts_for(c)]))
    return out


def _print_preview(plan: BenchPlan) -> int:
    from tunedeck.bench.workloads.preview import grouped, preview_json, preview_lines

    try:
        levels = level_previews(plan)
    except ValueError as e:
        return fail(str(e))
    if plan.json is not None:
        return write_json_data(plan, [{"level": label, **preview_json(p)} for label, p in levels])
    for labels, p in grouped(levels):
        print(f"[{', '.join(labels)}]")
        for line in preview_lines(p):
            print("  " + line)
    return 0


async def _local_run(plan: BenchPlan, cfg: Any, meta_extra: dict[str, Any], slo: Any = None) -> int:
    """The client here, against --url (the engine in this process); with ``slo``, the capacity search."""
    from tunedeck.bench.config import NotReady
    from tunedeck.bench.runner import run_benchmark
    from tunedeck.bench.store import StoreError

    u = cfg.url
    if any(h in u for h in ("//127.0.0.1", "//localhost", "//[::1]")):
        from tunedeck.hostops.localhost import LocalHost

        if shutil.which("nvidia-smi"):
            gpus = await host_gpus(LocalHost())
            if gpus:
                meta_extra = {"gpus": gpus, **meta_extra}
    emit, _ = printer(plan)
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)

    def run(c: Any) -> Any:
        return run_benchmark(c, emit=emit, meta_extra=meta_extra, client_where=plan.client_where)

    result = None
    try:
        if slo is None:
            summaries = await run(cfg)
        else:
            result = await search_capacity(plan, cfg, slo, run)
            summaries = [s.summary for s in result.steps]
    except NotReady as e:
        if plan.progress:
            emit({"type": "error", "kind": "NOT_READY", "message": str(e)})
        return fail(f"NOT_READY: {e}", 3)
    except StoreError as e:
        return fail(str(e), 1)
    except ValueError as e:  # a setting run_benchmark rejected (it names which)
        return fail(str(e))
    except asyncio.CancelledError:
        print("tunedeck bench: interrupted; finished samples were saved (summary marked partial)", file=sys.stderr)
        return 130
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    rc = write_json(plan, summaries) if result is None else write_json_data(plan, result.to_dict())
    if rc:
        return rc
    return 1 if summaries and all(s["completed"] == 0 for s in summaries) else 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    """``tunedeck bench`` arguments, parsed as the command line parses them."""
    from tunedeck.commands import common_parser, finish_args

    parser = argparse.ArgumentParser(prog="tunedeck", add_help=False, exit_on_error=False)
    sub = parser.add_subparsers(dest="command")
    register(sub, common_parser())
    try:
        return finish_args(parser.parse_args(["bench", *argv]))
    except SystemExit:
        raise ValueError(f"invalid bench arguments: {' '.join(argv)}") from None


async def start_plan(plan: BenchPlan) -> Any:
    """Start ``plan`` detached on its host, as the dashboard does: with ``--url`` the client runs on
    this machine as a host-side job too, so the dashboard's own event loop never skews it and closing
    the dashboard does not cut it. Returns a :class:`tunedeck.services.benchrun.BenchRun`; ValueError
    with one line when the plan cannot run."""
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.services.benchrun import BenchRun
    from tunedeck.services.targets import get_host

    check_plan(plan)
    plan, deployment = use_deployment(plan)
    cfg, where = _target(plan)
    host: Any = LocalHost() if plan.url else get_host(plan.host, demo=plan.demo)
    meta = {"target": "local", **where, **_recorded(plan, deployment)}
    return await BenchRun.start(host, cfg, meta_extra=meta, python=plan.python)
