"""``tunedeck bench``: a streaming serving benchmark comparable with ``vllm bench serve``."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from tunedeck.commands._argtypes import (
    int_list,
    nonneg_float,
    nonneg_int,
    percentiles,
    port,
    pos_float,
    pos_int,
    rate_list,
)
from tunedeck.commands._benchjob import EXIT_EPILOG, host_gpus, host_run
from tunedeck.commands._benchout import fail, printer, write_json, write_json_data
from tunedeck.commands._capacity import add_capacity_options, capacity_slo, search_capacity
from tunedeck.commands._workload import add_workload_options, check_workload, level_workloads, workload_from_args


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "bench",
        parents=[common],
        help="streaming serving benchmark with vLLM-compatible metrics",
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
    g.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
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
        help="prompt length in tokens (default 128; completions: exactly, as token ids; chat: fitted with "
        "the server's /tokenize where it has one); also the text and conversation sources' length",
    )
    w.add_argument(
        "--output-len",
        "--random-output-len",
        dest="output_len",
        type=pos_int,
        default=None,
        help="max_tokens per request (default 128); also the text and conversation sources' length",
    )
    w.add_argument("--warmup", type=nonneg_int, default=1, help="warmup requests per level (not recorded)")
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
    c.add_argument(
        "--python",
        metavar="PATH",
        default=None,
        help="the host's Python (>= 3.9) for the host-side client (default: python3 on its PATH)",
    )
    j = p.add_argument_group("host-side runs")
    j.add_argument(
        "--attach",
        metavar="ID",
        default=None,
        help="follow a benchmark running on --host/--demo again (its results are mirrored here)",
    )
    j.add_argument(
        "--stop",
        metavar="ID",
        default=None,
        help="stop a benchmark running on --host/--demo (finished samples are kept)",
    )
    o = p.add_argument_group("output")
    o.add_argument("--label", default=None)
    o.add_argument("--profile", default=None, help="profile name to record with the run")
    o.add_argument(
        "--meta-json",
        type=Path,
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
    import httpx

    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as e:
        raise ValueError(f"--url {url!r}: {e}") from None
    if u.scheme not in ("http", "https") or not u.host:
        raise ValueError(f"--url {url!r}: expected http://HOST:PORT")
    if u.port is not None and not 0 < u.port < 65536:
        raise ValueError(f"--url {url!r}: port {u.port} is outside 1..65535")


def _config(args: argparse.Namespace, url: str, goodput: dict[str, float]) -> Any:
    """The :class:`BenchConfig` the options ask for; ValueError naming a bad workload option or file."""
    from tunedeck.bench.config import BenchConfig
    from tunedeck.bench.workloads import default_ignore_eos

    workload = workload_from_args(args)
    ignore_eos = args.ignore_eos if args.ignore_eos is not None else default_ignore_eos(workload.name)
    cfg = BenchConfig(
        url=url,
        model=args.model,
        endpoint=args.endpoint,
        num_prompts=args.num_prompts,
        input_len=args.input_len or 128,
        output_len=args.output_len or 128,
        concurrency=args.concurrency or ([] if args.request_rate else [1]),
        request_rate=args.request_rate or [math.inf],
        burstiness=args.burstiness,
        warmup=args.warmup,
        ignore_eos=ignore_eos,
        temperature=args.temperature,
        seed=args.seed,
        goodput=goodput,
        percentiles=args.metric_percentiles,
        read_timeout=args.read_timeout,
        request_deadline=args.request_timeout,
        ready_timeout=args.ready_timeout,
        workers=args.workers,
        preconnect=args.preconnect,
        label=args.label,
        progress_samples=args.progress and args.progress_samples,
        workload=workload,
    )
    cfg.validate()
    check_workload(cfg)
    return cfg


def use_deployment(args: argparse.Namespace) -> dict[str, Any]:
    """Point ``args`` at a deployment's head node and serving port (``--deployment ID``) and return
    what the result records of it; ValueError, naming the deployment, when it cannot be benchmarked."""
    from tunedeck.hostops.runstore import FAILED, STOPPED
    from tunedeck.services.deploy import DeploymentStore

    if args.url or args.demo or args.host is not None:
        raise ValueError("--deployment names the host and port itself; drop --url/--host/--demo")
    rec = DeploymentStore().find(args.deployment)
    if rec is None:
        raise ValueError(f"--deployment {args.deployment}: no such deployment here (see `tunedeck runs --deployments`)")
    if rec.status in (STOPPED, FAILED):
        raise ValueError(f"deployment {rec.deploy_id} ({rec.profile}) is {rec.status}; launch it again first")
    if args.port is not None and args.port != rec.http_port:
        raise ValueError(f"deployment {rec.deploy_id} serves on port {rec.http_port}, not --port {args.port}")
    args.host, args.port = rec.head, rec.http_port
    if not args.profile:
        args.profile = rec.profile
    return {"deployment": rec.result_meta()}


async def run_bench(args: argparse.Namespace) -> int:
    from tunedeck.bench import metrics

    deployment: dict[str, Any] = {}
    if args.deployment:
        if args.attach or args.stop:
            return fail("--attach/--stop take a job id with --host; --deployment starts a new benchmark")
        try:
            deployment = use_deployment(args)
        except ValueError as e:
            return fail(str(e))
    if args.attach or args.stop:
        if args.url:
            return fail("--attach/--stop name a benchmark on --host/--demo, not on --url")
        return await host_run(args, None)
    try:
        goodput = metrics.parse_goodput(args.goodput)
    except ValueError as e:
        return fail(str(e))
    if args.concurrency and args.request_rate and len(args.concurrency) > 1 and len(args.request_rate) > 1:
        return fail("sweep over --concurrency or over --request-rate, not both")
    slo = None
    if args.capacity or args.slo:
        try:
            slo = capacity_slo(args)
        except ValueError as e:
            return fail(str(e))
    if args.preview:
        return _print_preview(args)
    meta_extra: dict[str, Any] = {}
    if args.meta_json is not None:
        try:
            meta_extra = json.loads(args.meta_json.read_text())
            if not isinstance(meta_extra, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:
            return fail(f"--meta-json {args.meta_json}: {e}")
    meta_extra.update(deployment)
    if args.profile:
        meta_extra["profile"] = args.profile
    if args.url:
        if args.host is not None or args.demo:
            return fail("give either --url or --host/--demo with --port, not both")
        if args.client_where == "host":
            return fail("--client-where host needs --host/--demo and --port (with --url the client runs here)")
        try:
            _check_url(args.url)
        except ValueError as e:
            return fail(str(e))
        try:
            cfg = _config(args, args.url, goodput)
        except ValueError as e:
            return fail(str(e))
        return await _local_run(args, cfg, meta_extra, slo)
    if args.port is None:
        return fail("need --url URL, or --port P with --host/--demo")
    try:
        cfg = _config(args, f"http://127.0.0.1:{args.port}", goodput)
    except ValueError as e:
        return fail(str(e))
    return await host_run(args, (cfg, meta_extra))


def level_previews(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(level label, :class:`~tunedeck.bench.workloads.preview.WorkloadPreview`) of every level the
    options ask for, built exactly as the run would build them (files read and checked here);
    ValueError (a WorkloadError among them) with one line naming the option, file or record."""
    from tunedeck.bench import metrics
    from tunedeck.bench.workloads.preview import preview

    url = args.url or f"http://127.0.0.1:{args.port or 8000}"  # not contacted: the run's URL rules apply
    cfg = _config(args, url, metrics.parse_goodput(args.goodput))
    built = {n: preview(w) for n, w in level_workloads(cfg)}
    out: list[tuple[str, Any]] = []
    for c, rate in cfg.levels():
        label = f"C={c}" if c is not None else "unbounded"
        if math.isfinite(rate):
            label += f", {rate:g} req/s"
        out.append((label, built[cfg.prompts_for(c)]))
    return out


def workload_preview_argv(argv: list[str]) -> list[tuple[str, Any]]:
    """:func:`level_previews` of a ``tunedeck bench`` argument list (the Bench setup screen's form)."""
    return level_previews(parse_args(argv))


def _print_preview(args: argparse.Namespace) -> int:
    from tunedeck.bench.workloads.preview import grouped, preview_json, preview_lines

    try:
        levels = level_previews(args)
    except ValueError as e:
        return fail(str(e))
    if args.json is not None:
        return write_json_data(args, [{"level": label, **preview_json(p)} for label, p in levels])
    for labels, p in grouped(levels):
        print(f"[{', '.join(labels)}]")
        for line in preview_lines(p):
            print("  " + line)
    return 0


async def _local_run(args: argparse.Namespace, cfg: Any, meta_extra: dict[str, Any], slo: Any = None) -> int:
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
    emit, _ = printer(args)
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)

    def run(c: Any) -> Any:
        return run_benchmark(c, emit=emit, meta_extra=meta_extra, client_where=args.client_where)

    result = None
    try:
        if slo is None:
            summaries = await run(cfg)
        else:
            result = await search_capacity(args, cfg, slo, run)
            summaries = [s.summary for s in result.steps]
    except NotReady as e:
        if args.progress:
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
    rc = write_json(args, summaries) if result is None else write_json_data(args, result.to_dict())
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


async def start_run(argv: list[str]) -> Any:
    """Start a benchmark detached on its host, as the dashboard does: with ``--url`` the client
    runs on this machine as a host-side job too, so the dashboard's own event loop never skews it
    and closing the dashboard does not cut it. Returns a :class:`tunedeck.services.benchrun.BenchRun`."""
    from tunedeck.bench import metrics
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.services.benchrun import BenchRun
    from tunedeck.services.targets import get_host

    args = parse_args(argv)
    goodput = metrics.parse_goodput(args.goodput)
    deployment = use_deployment(args) if args.deployment else {}
    if args.url:
        _check_url(args.url)
        host: Any = LocalHost()
        cfg = _config(args, args.url, goodput)
        meta: dict[str, Any] = {"target": "local"}
    elif args.port is not None:
        host = get_host(args.host, demo=args.demo)
        cfg = _config(args, f"http://127.0.0.1:{args.port}", goodput)
        meta = {"target": "demo" if args.demo else (args.host or "local"), "server_port": args.port}
    else:
        raise ValueError("need --url URL, or --port P with --host/--demo")
    meta.update(deployment)
    if args.profile:
        meta["profile"] = args.profile
    return await BenchRun.start(host, cfg, meta_extra=meta, python=args.python)
