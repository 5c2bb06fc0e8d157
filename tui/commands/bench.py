"""``tunedeck bench``: a streaming serving benchmark comparable with ``vllm bench serve``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import shutil
import signal
import sys
from pathlib import Path
from typing import Any, Callable

from tui.util.files import atomic_write_text

log = logging.getLogger(__name__)


def _int_list(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers separated by commas, e.g. 1,8,32") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be >= 1")
    return vals


def _rate_list(text: str) -> list[float]:
    out = []
    for x in text.split(","):
        x = x.strip()
        if not x:
            continue
        try:
            v = float(x)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected numbers or 'inf', e.g. 2,4,inf") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"{text!r}: rates must be > 0")
        out.append(v)
    if not out:
        raise argparse.ArgumentTypeError("empty request rate")
    return out


def _pos_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 1")
    return v


def _port(text: str) -> int:
    v = _pos_int(text)
    if v > 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: a port must be 1..65535")
    return v


def _nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 0")
    return v


def _pos_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
    if not v > 0 or math.isinf(v):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number > 0")
    return v


def _nonneg_float_arg(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
    if not 0 <= v < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number >= 0")
    return v


def _temperature(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
    if not 0 <= v < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number >= 0")
    return v


def _percentiles(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers separated by commas, e.g. 50,90,99") from None
    if not vals or any(not 0 <= v <= 100 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: every percentile must be within 0..100")
    return vals


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
        type=_port,
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
        type=_pos_float,
        default=120.0,
        metavar="S",
        help="seconds to wait for the server to answer /v1/models (default 120)",
    )
    w = p.add_argument_group("workload")
    w.add_argument(
        "--concurrency",
        type=_int_list,
        default=None,
        metavar="C[,C...]",
        help="max concurrency; a list sweeps (default 1 with an infinite rate)",
    )
    w.add_argument(
        "--request-rate",
        type=_rate_list,
        default=None,
        metavar="R[,R...]",
        help="requests/s (Gamma arrivals; 'inf' = all at once, gated by --concurrency); a list sweeps",
    )
    w.add_argument("--burstiness", type=_pos_float, default=1.0, help="Gamma shape (1 = Poisson)")
    w.add_argument("--num-prompts", type=_pos_int, default=None, help="requests per level (default 5 x C, >= 10)")
    w.add_argument(
        "--input-len",
        "--random-input-len",
        dest="input_len",
        type=_pos_int,
        default=None,
        help="prompt length in tokens (default 128; completions: exactly, as token ids; chat: fitted with "
        "the server's /tokenize where it has one); also the text and conversation sources' length",
    )
    w.add_argument(
        "--output-len",
        "--random-output-len",
        dest="output_len",
        type=_pos_int,
        default=None,
        help="max_tokens per request (default 128); also the text and conversation sources' length",
    )
    w.add_argument("--warmup", type=_nonneg_int, default=1, help="warmup requests per level (not recorded)")
    w.add_argument(
        "--ignore-eos",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send ignore_eos so every request generates its full output length (default: on, except "
        "for sharegpt and custom, whose prompts have real answers of their own length)",
    )
    add_workload_options(p)
    w.add_argument("--temperature", type=_temperature, default=0.0, help="sampling temperature (default 0)")
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
        type=_percentiles,
        default=[90.0, 99.0],
        metavar="P[,P...]",
        help="percentiles to report (default 90,99)",
    )
    k = p.add_argument_group("capacity at an SLO (with --url)")
    k.add_argument(
        "--capacity",
        action="store_true",
        help="find the highest concurrency whose level meets --slo: C=1 (the single-user speed), then "
        "doubling, then bisection to within 10%%, one level per step, each saved as usual; --json writes "
        "the search (capacity, single_user_tok_s, throughput_at_capacity, steps, closest)",
    )
    k.add_argument(
        "--slo",
        nargs="+",
        default=[],
        metavar="METRIC:BOUND",
        help="the SLO of --capacity: ttft_p50|p90|p99, tpot_p50|p90|p99, itl_p90|p99, e2el_p90|p99 (at most MS) "
        "and per_user_tok_s (at least N), e.g. ttft_p90:500 tpot_p90:50",
    )
    k.add_argument(
        "--capacity-max", type=_pos_int, default=1024, metavar="C", help="highest concurrency tried (default 1024)"
    )
    k.add_argument(
        "--capacity-steps", type=_pos_int, default=8, metavar="N", help="levels measured at most (default 8)"
    )
    c = p.add_argument_group("client")
    c.add_argument("--workers", type=_pos_int, default=1, help="client processes (when one core is not enough)")
    c.add_argument(
        "--no-preconnect",
        dest="preconnect",
        action="store_false",
        help="open connections during the timed phase instead of before it",
    )
    c.add_argument(
        "--read-timeout",
        type=_pos_float,
        default=600.0,
        metavar="S",
        help="largest gap allowed between two reads of a response (default 600)",
    )
    c.add_argument(
        "--request-timeout", type=_pos_float, default=None, metavar="S", help="per-request deadline (default none)"
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


def _ratio(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be within 0 (fixed lengths) and 1 (excluded)")
    return v


#: workload options: (flag, source, option key, type, help); vLLM's and SGLang's names
WORKLOAD_OPTIONS: tuple[tuple[str, str, str, Any, str], ...] = (
    ("--random-range-ratio", "random", "range_ratio", _ratio, "lengths uniform in [L*(1-r), L*(1+r)] (vLLM)"),
    ("--random-prefix-len", "random", "prefix_len", _nonneg_int, "one fixed prefix of N tokens before every prompt"),
    (
        "--sharegpt-output-len",
        "sharegpt",
        "output_len",
        _pos_int,
        "output length for every request (default: the answer's length in the file)",
    ),
    (
        "--custom-output-len",
        "custom",
        "output_len",
        _pos_int,
        "output length for every request (default: each line's output_len)",
    ),
    ("--prefix-repetition-prefix-len", "prefix_repetition", "prefix_len", _pos_int, "prefix tokens (default 256)"),
    ("--prefix-repetition-suffix-len", "prefix_repetition", "suffix_len", _pos_int, "suffix tokens (default 256)"),
    (
        "--prefix-repetition-num-prefixes",
        "prefix_repetition",
        "num_prefixes",
        _pos_int,
        "distinct prefixes (default 10)",
    ),
    ("--prefix-repetition-output-len", "prefix_repetition", "output_len", _pos_int, "output tokens (default 128)"),
    ("--gsp-num-groups", "shared_prefix", "num_groups", _pos_int, "groups sharing a system prompt (default 64)"),
    ("--gsp-prompts-per-group", "shared_prefix", "prompts_per_group", _pos_int, "prompts per group (default 16)"),
    ("--gsp-system-prompt-len", "shared_prefix", "system_prompt_len", _pos_int, "system prompt tokens (default 2048)"),
    ("--gsp-question-len", "shared_prefix", "question_len", _pos_int, "question tokens (default 128)"),
    ("--gsp-output-len", "shared_prefix", "output_len", _pos_int, "output tokens (default 256)"),
    (
        "--conversation-sessions",
        "conversation",
        "sessions",
        _pos_int,
        "sessions (default: enough for --num-prompts turns)",
    ),
    ("--conversation-turns", "conversation", "turns", _pos_int, "turns per session (default 4)"),
    (
        "--conversation-think-s",
        "conversation",
        "think_s",
        _nonneg_float_arg,
        "seconds between an answer and the next turn (default 1)",
    ),
    ("--trace-speed", "mooncake,burstgpt", "trace_speed", _pos_float, "replay a trace X times faster (default 1)"),
)


def add_workload_options(p: argparse.ArgumentParser) -> None:
    """``--dataset-name`` and every source's options (docs/workloads.md)."""
    from tui.bench.workloads import SOURCES

    d = p.add_argument_group("workload source (docs/workloads.md)")
    d.add_argument("--dataset-name", choices=SOURCES, default="random", help="where the requests come from")
    d.add_argument(
        "--dataset-path",
        metavar="FILE",
        default=None,
        help="the file of sharegpt, custom, mooncake, "
        "burstgpt (read and checked here; uploaded once to a host-side run)",
    )
    d.add_argument(
        "--context-limit",
        type=_pos_int,
        default=None,
        metavar="N",
        help="skip (and count) requests whose prompt + output exceed N tokens (default: the served "
        "model's context length, as the server's /v1/models reports it)",
    )
    for flag, _source, _key, typ, text in WORKLOAD_OPTIONS:
        metavar = {_ratio: "R", _pos_float: "X", _nonneg_float_arg: "S"}.get(typ, "N")
        d.add_argument(flag, type=typ, default=None, metavar=metavar, help=text)


def workload_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~tui.bench.workloads.WorkloadSpec` the options ask for; ValueError naming an option
    given for another source."""
    from tui.bench.workloads import WorkloadSpec

    name = args.dataset_name
    params: dict[str, Any] = {}
    for flag, sources, key, _typ, _text in WORKLOAD_OPTIONS:
        v = getattr(args, flag[2:].replace("-", "_"))
        if v is None:
            continue
        if name not in sources.split(","):
            raise ValueError(f"{flag} applies to --dataset-name {sources.replace(',', '/')}, not {name}")
        params[key] = v
    if name == "conversation":
        for key in ("input_len", "output_len"):
            if getattr(args, key) is not None:
                params[key] = getattr(args, key)
    elif name not in ("random", "text"):
        for key in ("input_len", "output_len"):
            if getattr(args, key) is not None:
                raise ValueError(f"--{key.replace('_', '-')} does not apply to --dataset-name {name} (see its options)")
    if args.context_limit is not None:
        params["context_limit"] = args.context_limit
    path = args.dataset_path
    if path is not None:
        path = str(Path(path).expanduser().absolute())
    return WorkloadSpec(name, path, params)


def check_workload(cfg: Any) -> None:
    """Build every level's requests here (reads and checks the file); WorkloadError with one line."""
    from tui.bench.workloads import build_workload

    spec = cfg.workload_spec()
    token_ids = cfg.token_ids and cfg.endpoint != "chat"
    for n in sorted({cfg.prompts_for(c) for c, _r in cfg.levels()}):
        build_workload(spec, n, cfg.seed, token_ids=token_ids)


def _fail(msg: str, code: int = 2) -> int:
    print(f"tunedeck bench: {msg}", file=sys.stderr)
    return code


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


async def _host_gpus(host: Any) -> list[str]:
    from tui.hostops.hosts import HostError

    try:
        r = await host.run(["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader"], timeout=10)
    except HostError as e:
        log.info("GPU names not recorded: %s", e)
        return []
    return [ln.strip() for ln in r.stdout.splitlines() if ln.strip()] if r.ok else []


def _config(args: argparse.Namespace, url: str, goodput: dict[str, float]) -> Any:
    """The :class:`BenchConfig` the options ask for; ValueError naming a bad workload option or file."""
    from tui.bench.config import BenchConfig
    from tui.bench.workloads import default_ignore_eos

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


def _printer(args: argparse.Namespace) -> tuple[Callable[[dict[str, Any]], None], set[Any]]:
    """The printer of a benchmark's events, and the run ids of the levels it has shown."""
    from tui.bench import metrics
    from tui.bench.workloads import workload_of
    from tui.services.benchrun import TUNNEL_NOTE, measured_through_tunnel
    from tui.util.safety import visible

    human = sys.stderr if (args.progress or args.json == "-") else sys.stdout

    shown: set[Any] = set()

    def emit(msg: dict[str, Any]) -> None:
        if msg.get("type") == "level_done":
            shown.add(msg["summary"].get("run_id"))
        _show(msg)

    def _show(msg: dict[str, Any]) -> None:
        if args.progress:
            sys.stdout.write(json.dumps(msg, separators=(",", ":"), allow_nan=False, default=str) + "\n")
            sys.stdout.flush()
        if msg.get("type") == "level_done":
            s = msg["summary"]
            c, r = s.get("max_concurrency"), s.get("request_rate")
            where = f"  ({TUNNEL_NOTE})" if measured_through_tunnel(s) else ""
            wl = visible(workload_of(s)["name"])
            print(f"run {s.get('run_id')}  concurrency={c} request_rate={r} workload={wl}{where}", file=human)
            print(metrics.format_result(s, args.metric_percentiles), file=human)
            print(metrics.format_extras(s), file=human, flush=True)
        elif msg.get("type") == "waiting" and not args.progress:
            print(f"waiting for {msg['url']} (up to {msg['timeout']:g} s)...", file=sys.stderr, flush=True)

    return emit, shown


def _write_json(args: argparse.Namespace, summaries: list[dict[str, Any]]) -> int:
    return _write_json_data(args, summaries[0] if len(summaries) == 1 else summaries)


def _write_json_data(args: argparse.Namespace, data: Any) -> int:
    """``--json``: ``data`` to stdout or the file it names."""
    if args.json is None:
        return 0
    text = json.dumps(data, indent=2, default=str) + "\n"
    if args.json == "-":
        sys.stdout.write(text)
        return 0
    try:
        atomic_write_text(Path(args.json), text)
    except OSError as e:
        return _fail(f"--json {args.json}: {e.strerror or e}", 1)
    return 0


def use_deployment(args: argparse.Namespace) -> dict[str, Any]:
    """Point ``args`` at a deployment's head node and serving port (``--deployment ID``) and return
    what the result records of it; ValueError, naming the deployment, when it cannot be benchmarked."""
    from tui.hostops.runstore import FAILED, STOPPED
    from tui.services.deploy import DeploymentStore

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
    from tui.bench import metrics

    deployment: dict[str, Any] = {}
    if args.deployment:
        if args.attach or args.stop:
            return _fail("--attach/--stop take a job id with --host; --deployment starts a new benchmark")
        try:
            deployment = use_deployment(args)
        except ValueError as e:
            return _fail(str(e))
    if args.attach or args.stop:
        if args.url:
            return _fail("--attach/--stop name a benchmark on --host/--demo, not on --url")
        return await _host_run(args, None)
    try:
        goodput = metrics.parse_goodput(args.goodput)
    except ValueError as e:
        return _fail(str(e))
    if args.concurrency and args.request_rate and len(args.concurrency) > 1 and len(args.request_rate) > 1:
        return _fail("sweep over --concurrency or over --request-rate, not both")
    slo = None
    if args.capacity or args.slo:
        try:
            slo = _capacity_slo(args)
        except ValueError as e:
            return _fail(str(e))
    if args.preview:
        return _print_preview(args)
    meta_extra: dict[str, Any] = {}
    if args.meta_json is not None:
        try:
            meta_extra = json.loads(args.meta_json.read_text())
            if not isinstance(meta_extra, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:
            return _fail(f"--meta-json {args.meta_json}: {e}")
    meta_extra.update(deployment)
    if args.profile:
        meta_extra["profile"] = args.profile
    if args.url:
        if args.host is not None or args.demo:
            return _fail("give either --url or --host/--demo with --port, not both")
        if args.client_where == "host":
            return _fail("--client-where host needs --host/--demo and --port (with --url the client runs here)")
        try:
            _check_url(args.url)
        except ValueError as e:
            return _fail(str(e))
        try:
            cfg = _config(args, args.url, goodput)
        except ValueError as e:
            return _fail(str(e))
        return await _local_run(args, cfg, meta_extra, slo)
    if args.port is None:
        return _fail("need --url URL, or --port P with --host/--demo")
    try:
        cfg = _config(args, f"http://127.0.0.1:{args.port}", goodput)
    except ValueError as e:
        return _fail(str(e))
    return await _host_run(args, (cfg, meta_extra))


def level_previews(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(level label, :class:`~tui.bench.workloads.preview.WorkloadPreview`) of every level the
    options ask for, built exactly as the run would build them (files read and checked here);
    ValueError (a WorkloadError among them) with one line naming the option, file or record."""
    from tui.bench import metrics
    from tui.bench.workloads import build_workload
    from tui.bench.workloads.preview import preview

    url = args.url or f"http://127.0.0.1:{args.port or 8000}"  # not contacted: the run's URL rules apply
    cfg = _config(args, url, metrics.parse_goodput(args.goodput))
    token_ids = cfg.token_ids and cfg.endpoint != "chat"
    out: list[tuple[str, Any]] = []
    built: dict[int, Any] = {}
    for c, rate in cfg.levels():
        n = cfg.prompts_for(c)
        if n not in built:
            built[n] = preview(build_workload(cfg.workload_spec(), n, cfg.seed, token_ids=token_ids))
        label = f"C={c}" if c is not None else "unbounded"
        if math.isfinite(rate):
            label += f", {rate:g} req/s"
        out.append((label, built[n]))
    return out


def workload_preview_argv(argv: list[str]) -> list[tuple[str, Any]]:
    """:func:`level_previews` of a ``tunedeck bench`` argument list (the Bench setup screen's form)."""
    return level_previews(parse_args(argv))


def _print_preview(args: argparse.Namespace) -> int:
    from tui.bench.workloads.preview import grouped, preview_json, preview_lines

    try:
        levels = level_previews(args)
    except ValueError as e:
        return _fail(str(e))
    if args.json is not None:
        text = json.dumps([{"level": label, **preview_json(p)} for label, p in levels], indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
        return 0
    for labels, p in grouped(levels):
        print(f"[{', '.join(labels)}]")
        for line in preview_lines(p):
            print("  " + line)
    return 0


def _capacity_slo(args: argparse.Namespace) -> Any:
    """The SLO terms of ``--capacity --slo``; ValueError with one line when the options do not fit."""
    from tui.ab.capacity import parse_slo

    if not args.capacity:
        raise ValueError("--slo is the target of --capacity: add --capacity (goodput targets are --goodput)")
    if not args.slo:
        raise ValueError("--capacity needs --slo METRIC:BOUND ..., e.g. --slo ttft_p90:500 tpot_p90:50")
    if args.concurrency or args.request_rate:
        raise ValueError("--capacity chooses each level's concurrency itself: drop --concurrency/--request-rate")
    if not args.url:
        raise ValueError("--capacity runs the client here, against --url (e.g. --url http://127.0.0.1:PORT)")
    try:
        return parse_slo(args.slo)
    except ValueError as e:
        raise ValueError(f"--slo: {e}") from None


async def _capacity(args: argparse.Namespace, cfg: Any, slo: Any, run: Callable[[Any], Any]) -> Any:
    """:func:`tui.ab.capacity.find_capacity` with one closed-loop level of ``cfg`` per step (``run``
    benchmarks a config and returns its summaries); each step and the result are printed."""
    import dataclasses

    from tui.ab.capacity import find_capacity

    human = sys.stderr if (args.progress or args.json == "-") else sys.stdout

    async def measure(c: int) -> Any:
        [summary] = await run(dataclasses.replace(cfg, concurrency=[c], request_rate=[math.inf]))
        return summary

    def on_step(s: Any) -> None:
        said = "meets the SLO" if s.met else "misses the SLO: " + "; ".join(s.reasons)
        print(f"capacity step C={s.concurrency}: {said}", file=human, flush=True)

    r = await find_capacity(
        measure, slo, max_concurrency=args.capacity_max, max_steps=args.capacity_steps, on_step=on_step
    )
    terms = " ".join(str(t) for t in slo)
    single = f"{r.single_user_tok_s:.1f} tok/s" if r.single_user_tok_s is not None else "N/A"
    if r.capacity is not None:
        tput = f"{r.throughput_at_capacity:.1f}" if r.throughput_at_capacity is not None else "N/A"
        print(
            f"capacity at {terms}: {r.capacity} concurrent users, {tput} output tok/s; single user {single}",
            file=human,
        )
    else:
        why = "; ".join(r.closest.reasons) if r.closest is not None else "nothing measured"
        print(f"capacity at {terms}: none (not even 1 user; single user {single}): {why}", file=human)
    return r


async def _local_run(args: argparse.Namespace, cfg: Any, meta_extra: dict[str, Any], slo: Any = None) -> int:
    """The client here, against --url (the engine in this process); with ``slo``, the capacity search."""
    from tui.bench.config import NotReady
    from tui.bench.runner import run_benchmark
    from tui.bench.store import StoreError

    u = cfg.url
    if any(h in u for h in ("//127.0.0.1", "//localhost", "//[::1]")):
        from tui.hostops.hosts import LocalHost

        if shutil.which("nvidia-smi"):
            gpus = await _host_gpus(LocalHost())
            if gpus:
                meta_extra = {"gpus": gpus, **meta_extra}
    emit, _ = _printer(args)
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
            result = await _capacity(args, cfg, slo, run)
            summaries = [s.summary for s in result.steps]
    except NotReady as e:
        if args.progress:
            emit({"type": "error", "kind": "NOT_READY", "message": str(e)})
        return _fail(f"NOT_READY: {e}", 3)
    except StoreError as e:
        return _fail(str(e), 1)
    except ValueError as e:  # a setting run_benchmark rejected (it names which)
        return _fail(str(e))
    except asyncio.CancelledError:
        print("tunedeck bench: interrupted; finished samples were saved (summary marked partial)", file=sys.stderr)
        return 130
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    rc = _write_json(args, summaries) if result is None else _write_json_data(args, result.to_dict())
    if rc:
        return rc
    return 1 if summaries and all(s["completed"] == 0 for s in summaries) else 0


async def _host_run(args: argparse.Namespace, new: tuple[Any, dict[str, Any]] | None) -> int:
    """A benchmark on --host/--demo: start (or attach to / stop) it and follow it here."""
    from tui.hostops.hosts import HostError
    from tui.services import jobs, runtime
    from tui.services.benchrun import HOST, BenchRun
    from tui.services.targets import get_host
    from tui.util.safety import UnsafeInput

    try:
        host = get_host(args.host, demo=args.demo)
    except (UnsafeInput, HostError) as e:
        return _fail(str(e))
    target = "demo" if args.demo else (args.host or "local")
    try:
        if args.stop:
            run = await BenchRun.attach(host, args.stop)
            print(await run.stop(), file=sys.stderr)
            await run.mirror()
            return 0
        if args.attach:
            run = await BenchRun.attach(host, args.attach)
            if not run.job or not run.job.alive:
                print(f"tunedeck bench: job {run.job_id} has ended; its results are mirrored here", file=sys.stderr)
        else:
            assert new is not None
            cfg, meta_extra = new
            meta_extra = {"target": target, "server_port": args.port, **meta_extra}
            gpus = await _host_gpus(host)
            if gpus:
                meta_extra.setdefault("gpus", gpus)
            where = args.client_where or "host"
            run = await BenchRun.start(
                host, cfg, meta_extra=meta_extra, where=HOST if where == "host" else "local", python=args.python
            )
        if run.job is not None and run.job.alive:
            print(
                f"tunedeck bench: job {run.job_id} runs on {target} next to the server; Ctrl-C detaches "
                f"(it goes on); follow it with `tunedeck bench --attach {run.job_id}`, stop it with "
                f"`--stop {run.job_id}`",
                file=sys.stderr,
                flush=True,
            )
        return await _follow(args, run)
    except (jobs.JobError, runtime.RuntimeUnavailable, ValueError) as e:
        return _fail(str(e), 1)
    except HostError as e:
        return _fail(f"{target}: {e}", 1)
    finally:
        await host.close()


async def _follow(args: argparse.Namespace, run: Any) -> int:
    emit, shown = _printer(args)
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
    rc = _write_json(args, run.summaries)
    code = exit_code(run)
    if ex.get("error") and code != EXIT_OK:
        kind = "NOT_READY: " if ex.get("rc") == 3 and not str(ex["error"]).startswith("NOT_READY") else ""
        if args.progress and ex.get("rc") == 3:
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
    from tui.services.benchrun import COMPLETE, LOST, PARTIAL

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


def parse_args(argv: list[str]) -> argparse.Namespace:
    """``tunedeck bench`` arguments, parsed as the command line parses them."""
    from tui.commands import common_parser, finish_args

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
    and closing the dashboard does not cut it. Returns a :class:`tui.services.benchrun.BenchRun`."""
    from tui.bench import metrics
    from tui.hostops.hosts import LocalHost
    from tui.services.benchrun import BenchRun
    from tui.services.targets import get_host

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
