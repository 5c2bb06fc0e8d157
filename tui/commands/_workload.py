"""The workload source options of ``tunedeck bench`` and ``tunedeck tune`` (``--dataset-name`` and
each source's own options, docs/workloads.md), and the :class:`~tunedeck.bench.workloads.WorkloadSpec`
they ask for. The Bench setup screen builds its form from the same table. Also the two commands'
``--endpoint`` and ``--warmup``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Iterator, Sequence

from tunedeck.bench.plan import BenchPlan
from tunedeck.commands._argtypes import nonneg_float, nonneg_int, pos_float, pos_int, ratio

#: workload options: (flag, source, option key, type, help); vLLM's and SGLang's names
WORKLOAD_OPTIONS: tuple[tuple[str, str, str, Any, str], ...] = (
    ("--random-range-ratio", "random", "range_ratio", ratio, "lengths uniform in [L*(1-r), L*(1+r)] (vLLM)"),
    ("--random-prefix-len", "random", "prefix_len", nonneg_int, "one fixed prefix of N tokens before every prompt"),
    (
        "--sharegpt-output-len",
        "sharegpt",
        "output_len",
        pos_int,
        "output length for every request (default: the answer's length in the file)",
    ),
    (
        "--custom-output-len",
        "custom",
        "output_len",
        pos_int,
        "output length for every request (default: each line's output_len, else 256 as in vLLM)",
    ),
    ("--prefix-repetition-prefix-len", "prefix_repetition", "prefix_len", pos_int, "prefix tokens (default 256)"),
    ("--prefix-repetition-suffix-len", "prefix_repetition", "suffix_len", pos_int, "suffix tokens (default 256)"),
    (
        "--prefix-repetition-num-prefixes",
        "prefix_repetition",
        "num_prefixes",
        pos_int,
        "distinct prefixes (default 10)",
    ),
    ("--prefix-repetition-output-len", "prefix_repetition", "output_len", pos_int, "output tokens (default 128)"),
    ("--gsp-num-groups", "shared_prefix", "num_groups", pos_int, "groups sharing a system prompt (default 64)"),
    ("--gsp-prompts-per-group", "shared_prefix", "prompts_per_group", pos_int, "prompts per group (default 16)"),
    ("--gsp-system-prompt-len", "shared_prefix", "system_prompt_len", pos_int, "system prompt tokens (default 2048)"),
    ("--gsp-question-len", "shared_prefix", "question_len", pos_int, "question tokens (default 128)"),
    ("--gsp-output-len", "shared_prefix", "output_len", pos_int, "output tokens (default 256)"),
    (
        "--conversation-sessions",
        "conversation",
        "sessions",
        pos_int,
        "sessions (default: enough for --num-prompts turns)",
    ),
    ("--conversation-turns", "conversation", "turns", pos_int, "turns per session (default 4)"),
    (
        "--conversation-think-s",
        "conversation",
        "think_s",
        nonneg_float,
        "seconds between an answer and the next turn (default 1)",
    ),
    ("--trace-speed", "mooncake,burstgpt", "trace_speed", pos_float, "replay a trace X times faster (default 1)"),
)


def add_workload_options(p: argparse.ArgumentParser) -> None:
    """``--dataset-name`` and every source's options (docs/workloads.md)."""
    from tunedeck.bench.workloads import SOURCES

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
        type=pos_int,
        default=None,
        metavar="N",
        help="skip (and count) requests whose prompt + output exceed N tokens (default: the served "
        "model's context length, as the server's /v1/models reports it)",
    )
    for flag, _source, _key, typ, text in WORKLOAD_OPTIONS:
        metavar = {ratio: "R", pos_float: "X", nonneg_float: "S"}.get(typ, "N")
        d.add_argument(flag, type=typ, default=None, metavar=metavar, help=text)


def add_endpoint_option(g: argparse._ActionsContainer) -> None:
    """``--endpoint`` of ``bench`` and ``tune``: the API the requests are sent to."""
    g.add_argument("--endpoint", choices=("completions", "chat"), default="completions")


def add_warmup_option(g: argparse._ActionsContainer) -> None:
    """``--warmup`` of ``bench`` and ``tune``: requests sent before each level's timed phase."""
    g.add_argument("--warmup", type=nonneg_int, default=1, help="warmup requests per level (not recorded)")


def workload_options(args: argparse.Namespace) -> tuple[tuple[str, Any], ...]:
    """(flag, value) of every source option given (:data:`WORKLOAD_OPTIONS` order)."""
    got = ((flag, getattr(args, flag[2:].replace("-", "_"))) for flag, *_rest in WORKLOAD_OPTIONS)
    return tuple((flag, v) for flag, v in got if v is not None)


def dataset_file(path: str | None) -> str | None:
    """The dataset file as the run reads it: absolute, ``~`` expanded."""
    return None if path is None else str(Path(path).expanduser().absolute())


def workload_spec(
    name: str,
    path: str | None,
    options: Sequence[tuple[str, Any]],
    *,
    input_len: int | None = None,
    output_len: int | None = None,
    context_limit: int | None = None,
) -> Any:
    """The :class:`~tunedeck.bench.workloads.WorkloadSpec` of source ``name`` with its file and its
    options ((flag, value)); ValueError naming an option given for another source."""
    from tunedeck.bench.workloads import WorkloadSpec

    by_flag = {flag: (sources, key) for flag, sources, key, _typ, _text in WORKLOAD_OPTIONS}
    params: dict[str, Any] = {}
    for flag, v in options:
        sources, key = by_flag[flag]
        if name not in sources.split(","):
            raise ValueError(f"{flag} applies to --dataset-name {sources.replace(',', '/')}, not {name}")
        params[key] = v
    lengths = {"input_len": input_len, "output_len": output_len}
    for key, v in lengths.items():
        if v is None:
            continue
        if name == "conversation":
            params[key] = v
        elif name not in ("random", "text"):
            raise ValueError(f"--{key.replace('_', '-')} does not apply to --dataset-name {name} (see its options)")
    if context_limit is not None:
        params["context_limit"] = context_limit
    return WorkloadSpec(name, path, params)


def workload_from_args(args: argparse.Namespace) -> Any:
    """:func:`workload_spec` of the parsed options."""
    return workload_spec(
        args.dataset_name,
        dataset_file(args.dataset_path),
        workload_options(args),
        input_len=args.input_len,
        output_len=args.output_len,
        context_limit=args.context_limit,
    )


def plan_workload(plan: BenchPlan) -> Any:
    """:func:`workload_spec` of a :class:`~tunedeck.bench.plan.BenchPlan`."""
    return workload_spec(
        plan.dataset_name,
        plan.dataset_path,
        plan.workload_options,
        input_len=plan.input_len,
        output_len=plan.output_len,
        context_limit=plan.context_limit,
    )


def level_workloads(cfg: Any) -> Iterator[tuple[int, Any]]:
    """(request count, its requests) of every level of ``cfg`` (a
    :class:`~tunedeck.bench.config.BenchConfig`), built here one at a time as the run builds them (files
    read and checked); WorkloadError with one line."""
    from tunedeck.bench.workloads import build_workload

    spec = cfg.workload_spec()
    token_ids = cfg.token_ids and cfg.endpoint != "chat"
    for n in sorted({cfg.prompts_for(c) for c, _r in cfg.levels()}):
        yield n, build_workload(spec, n, cfg.seed, token_ids=token_ids)


def check_workload(cfg: Any) -> None:
    """Build every level's requests here (reads and checks the file); WorkloadError with one line."""
    for _n, _workload in level_workloads(cfg):
        pass
