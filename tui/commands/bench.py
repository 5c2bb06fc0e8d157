"""``tunedeck bench``: a streaming serving benchmark comparable with ``vllm bench serve``."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import signal
import sys
from pathlib import Path
from typing import Any

from tui.util.files import atomic_write_text


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
    )
    g = p.add_argument_group("server")
    g.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:8000")
    g.add_argument("--port", type=_port, help="server port on --host/--demo (reached through a port forward)")
    g.add_argument("--model", help="model name (default: the first one /v1/models lists)")
    g.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    g.add_argument("--ready-timeout", type=_pos_float, default=120.0, metavar="S",
                   help="seconds to wait for the server to answer /v1/models (default 120)")
    w = p.add_argument_group("workload")
    w.add_argument("--concurrency", type=_int_list, default=None, metavar="C[,C...]",
                   help="max concurrency; a list sweeps (default 1 with an infinite rate)")
    w.add_argument("--request-rate", type=_rate_list, default=None, metavar="R[,R...]",
                   help="requests/s (Gamma arrivals; 'inf' = all at once, gated by --concurrency); a list sweeps")
    w.add_argument("--burstiness", type=_pos_float, default=1.0, help="Gamma shape (1 = Poisson)")
    w.add_argument("--num-prompts", type=_pos_int, default=None, help="requests per level (default 5 x C, >= 10)")
    w.add_argument("--input-len", type=_pos_int, default=128,
                   help="prompt length in tokens (completions: exactly, as token ids; chat: fitted with the "
                   "server's /tokenize where it has one)")
    w.add_argument("--output-len", type=_pos_int, default=128, help="max_tokens per request")
    w.add_argument("--warmup", type=_nonneg_int, default=1, help="warmup requests per level (not recorded)")
    w.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True,
                   help="send ignore_eos so every request generates --output-len tokens (default on)")
    w.add_argument("--temperature", type=_temperature, default=0.0, help="sampling temperature (default 0)")
    w.add_argument("--seed", type=int, default=0)
    m = p.add_argument_group("metrics")
    m.add_argument("--goodput", nargs="+", default=[], metavar="KEY:MS",
                   help="SLOs for goodput: ttft:MS tpot:MS e2el:MS")
    m.add_argument("--metric-percentiles", type=_percentiles, default=[90.0, 99.0], metavar="P[,P...]",
                   help="percentiles to report (default 90,99)")
    c = p.add_argument_group("client")
    c.add_argument("--workers", type=_pos_int, default=1, help="client processes (when one core is not enough)")
    c.add_argument("--no-preconnect", dest="preconnect", action="store_false",
                   help="open connections during the timed phase instead of before it")
    c.add_argument("--read-timeout", type=_pos_float, default=600.0, metavar="S",
                   help="largest gap allowed between two reads of a response (default 600)")
    c.add_argument("--request-timeout", type=_pos_float, default=None, metavar="S",
                   help="per-request deadline (default none)")
    c.add_argument("--client-where", choices=("local", "gpu-host", "same-host", "remote"), default=None,
                   help="where this client runs (recorded; default: derived from the URL)")
    o = p.add_argument_group("output")
    o.add_argument("--label", default=None)
    o.add_argument("--profile", default=None, help="profile name to record with the run")
    o.add_argument("--meta-json", type=Path, default=None, metavar="FILE",
                   help="JSON object merged into meta.json (server argv/env, gpus, ...; secrets redacted)")
    o.add_argument("--progress", action="store_true",
                   help="JSON progress lines on stdout (one per second); the result block goes to stderr")
    o.add_argument("--progress-samples", action="store_true", help="with --progress: one line per request too")
    o.add_argument("--json", nargs="?", const="-", default=None, metavar="OUT",
                   help="write the summary JSON to OUT ('-' or no value: stdout)")
    p.set_defaults(func=run_bench)


def _fail(msg: str, code: int = 2) -> int:
    print(f"tunedeck bench: {msg}", file=sys.stderr)
    return code


async def _local_gpus() -> list[str]:
    import shutil

    if not shutil.which("nvidia-smi"):
        return []
    from tui.services.hosts import LocalHost

    try:
        r = await LocalHost().run(["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader"],
                                  timeout=10)
    except Exception:  # noqa: BLE001 - best effort
        return []
    return [ln.strip() for ln in r.stdout.splitlines() if ln.strip()] if r.ok else []


async def _resolve_url(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    extra: dict[str, Any] = {}
    if args.url:
        if args.host is not None or args.demo:
            raise ValueError("give either --url or --host/--demo with --port, not both")
        import httpx

        try:
            u = httpx.URL(args.url)
        except (httpx.InvalidURL, TypeError) as e:
            raise ValueError(f"--url {args.url!r}: {e}") from None
        if u.scheme not in ("http", "https") or not u.host:
            raise ValueError(f"--url {args.url!r}: expected http://HOST:PORT")
        if u.port is not None and not 0 < u.port < 65536:
            raise ValueError(f"--url {args.url!r}: port {u.port} is outside 1..65535")
        if u.host in ("127.0.0.1", "localhost", "::1"):
            gpus = await _local_gpus()
            if gpus:
                extra["gpus"] = gpus
        return args.url, extra
    if args.port is None:
        raise ValueError("need --url URL, or --port P with --host/--demo")
    from tui.services.hosts import get_host

    try:
        host = get_host(args.host, demo=args.demo)
    except ImportError as e:
        raise ValueError(f"--demo: the simulator is not available ({e})") from None
    local = await host.forward_port(args.port)
    extra["target"] = "demo" if args.demo else (args.host or "local")
    extra["server_port"] = args.port
    extra["client"] = {"via": "direct" if host.is_local else "ssh-forward"}
    try:
        r = await host.run(["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader"],
                           timeout=10)
        if r.ok:
            extra["gpus"] = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]
    except Exception:  # noqa: BLE001 - best effort
        pass
    return f"http://127.0.0.1:{local}", extra


async def run_bench(args: argparse.Namespace) -> int:
    from tui.bench import metrics
    from tui.bench.runner import BenchConfig, NotReady, run_benchmark
    from tui.bench.store import StoreError

    try:
        goodput = metrics.parse_goodput(args.goodput)
    except ValueError as e:
        return _fail(str(e))
    percentiles = args.metric_percentiles
    if args.concurrency and args.request_rate and len(args.concurrency) > 1 and len(args.request_rate) > 1:
        return _fail("sweep over --concurrency or over --request-rate, not both")
    meta_extra: dict[str, Any] = {}
    if args.meta_json is not None:
        try:
            meta_extra = json.loads(args.meta_json.read_text())
            if not isinstance(meta_extra, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:
            return _fail(f"--meta-json {args.meta_json}: {e}")
    try:
        url, extra = await _resolve_url(args)
    except ValueError as e:
        return _fail(str(e))
    except Exception as e:  # noqa: BLE001 - host errors
        return _fail(f"{args.host or 'demo'}: {e}", 1)
    meta_extra = {**extra, **meta_extra}
    if args.profile:
        meta_extra["profile"] = args.profile
    cfg = BenchConfig(
        url=url,
        model=args.model,
        endpoint=args.endpoint,
        num_prompts=args.num_prompts,
        input_len=args.input_len,
        output_len=args.output_len,
        concurrency=args.concurrency or ([] if args.request_rate else [1]),
        request_rate=args.request_rate or [math.inf],
        burstiness=args.burstiness,
        warmup=args.warmup,
        ignore_eos=args.ignore_eos,
        temperature=args.temperature,
        seed=args.seed,
        goodput=goodput,
        percentiles=percentiles,
        read_timeout=args.read_timeout,
        request_deadline=args.request_timeout,
        ready_timeout=args.ready_timeout,
        workers=args.workers,
        preconnect=args.preconnect,
        label=args.label,
        progress_samples=args.progress and args.progress_samples,
    )
    human = sys.stderr if (args.progress or args.json == "-") else sys.stdout

    def emit(msg: dict[str, Any]) -> None:
        if args.progress:
            sys.stdout.write(json.dumps(msg, separators=(",", ":"), allow_nan=False, default=str) + "\n")
            sys.stdout.flush()
        if msg.get("type") == "level_done":
            s = msg["summary"]
            c, r = s.get("max_concurrency"), s.get("request_rate")
            print(f"run {s.get('run_id')}  concurrency={c} request_rate={r}", file=human)
            print(metrics.format_result(s, percentiles), file=human)
            print(metrics.format_extras(s), file=human, flush=True)
        elif msg.get("type") == "waiting" and not args.progress:
            print(f"waiting for {msg['url']} (up to {msg['timeout']:g} s)...", file=sys.stderr, flush=True)

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, task.cancel)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        summaries = await run_benchmark(cfg, emit=emit, meta_extra=meta_extra, client_where=args.client_where)
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
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):
                pass
    if args.json is not None:
        data: Any = summaries[0] if len(summaries) == 1 else summaries
        text = json.dumps(data, indent=2, default=str) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            try:
                atomic_write_text(Path(args.json), text)
            except OSError as e:
                return _fail(f"--json {args.json}: {e.strerror or e}", 1)
    if summaries and all(s["completed"] == 0 for s in summaries):
        return 1
    return 0
