"""Benchmark workloads: which requests a level sends (``--dataset-name``), built from options or a file.

:func:`build_workload` is the one entry point; docs/workloads.md is the operator's manual.
Standard library only, Python >= 3.9: it also runs on the GPU host, inside the runtime.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from tunedeck.bench.workloads.base import (
    MOONCAKE_BLOCK,
    Workload,
    WorkloadError,
    WorkloadSpec,
    check_int,
    distribution,
    length_distributions,
    measured_lengths,
    prompt_set_sha256,
)
from tunedeck.bench.workloads.datasets import burstgpt, custom, mooncake, sharegpt
from tunedeck.bench.workloads.synthetic import (
    conversation,
    prefix_repetition,
    random_source,
    shared_prefix,
    text_source,
)
from tunedeck.util.safety import visible

__all__ = [
    "FILE_SOURCES",
    "MOONCAKE_BLOCK",
    "OPTIONS",
    "SIZED_SOURCES",
    "SOURCES",
    "TRACE_SOURCES",
    "Workload",
    "WorkloadError",
    "WorkloadSpec",
    "build_workload",
    "default_ignore_eos",
    "distribution",
    "length_distributions",
    "measured_lengths",
    "prompt_set_sha256",
    "with_lengths",
    "workload_of",
]

#: every source, in the order ``--dataset-name`` lists them
SOURCES = (
    "random",
    "sharegpt",
    "custom",
    "prefix_repetition",
    "shared_prefix",
    "text",
    "conversation",
    "mooncake",
    "burstgpt",
)
#: each source's options (``[workload]`` keys in a plan; every one also takes ``context_limit``)
OPTIONS: Dict[str, Tuple[str, ...]] = {
    "random": ("input_len", "output_len", "range_ratio", "prefix_len", "input_lens", "output_lens"),
    "sharegpt": ("output_len", "max_prompt_len", "max_total_len"),
    "custom": ("output_len",),
    "prefix_repetition": ("prefix_len", "suffix_len", "num_prefixes", "output_len"),
    "shared_prefix": ("num_groups", "prompts_per_group", "system_prompt_len", "question_len", "output_len"),
    "text": ("input_len", "output_len"),
    "conversation": ("sessions", "turns", "input_len", "output_len", "think_s"),
    "mooncake": ("trace_speed",),
    "burstgpt": ("trace_speed",),
}
#: sources read from ``--dataset-path``
FILE_SOURCES = frozenset({"sharegpt", "custom", "mooncake", "burstgpt"})
#: traces: every request carries its send time (``at_s``)
TRACE_SOURCES = frozenset({"mooncake", "burstgpt"})
#: sources whose own options say how many requests there are (``--num-prompts`` only caps a trace)
SIZED_SOURCES = frozenset({"shared_prefix", "mooncake", "burstgpt"})


#: sources whose prompts and answers are real text with their own lengths: ignore_eos is off by default
#: for them (every other source's prompts are made up, so only ignore_eos gives the lengths asked for)
OWN_ANSWERS = frozenset({"sharegpt", "custom"})


def default_ignore_eos(name: str) -> bool:
    """``ignore_eos`` when the operator does not say: on, except for datasets of real conversations."""
    return name not in OWN_ANSWERS


def build_workload(
    spec: WorkloadSpec, n: int, seed: int, *, token_ids: bool = True, server_context: Optional[int] = None
) -> Workload:
    """The requests of one level: ``n`` of them (a sized source decides its own count; a trace
    sends its first ``n`` rows at most), seeded. ``token_ids``: synthetic prompts as token ids
    (exact lengths, for ``/v1/completions``) rather than words. ``spec.params["context_limit"]``
    (the operator's ``--context-limit``), else ``server_context`` (the served model's context
    length, as the server reports it), skips (and counts) requests whose prompt plus output would
    not fit; only the operator's limit is one of the workload's params.

    Raises :class:`WorkloadError` (a ValueError) with one line naming the option, or the file and
    its line or record."""
    if spec.name not in SOURCES:
        raise WorkloadError(f"--dataset-name {spec.name!r}: expected one of {', '.join(SOURCES)}")
    if spec.name in FILE_SOURCES and not spec.path:
        raise WorkloadError(f"--dataset-name {spec.name} needs a file: --dataset-path FILE")
    if spec.name not in FILE_SOURCES and spec.path:
        raise WorkloadError(f"--dataset-name {spec.name} reads no file; drop --dataset-path {spec.path}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise WorkloadError(f"workload: {n!r} requests asked for; expected a whole number >= 1")
    params = dict(spec.params)
    unknown = sorted(set(params) - set(OPTIONS[spec.name]) - {"context_limit"})
    if unknown:
        raise WorkloadError(
            f"workload option {unknown[0]} does not apply to {spec.name} "
            f"(its options: {', '.join(OPTIONS[spec.name] + ('context_limit',))})"
        )
    option_limit = check_int(params, "context_limit", None)
    limit = option_limit if option_limit is not None else server_context
    name = spec.name
    if name == "sharegpt":
        wl = sharegpt(params, spec.path, n, seed, limit)
    elif name == "custom":
        wl = custom(params, spec.path, n, seed, limit)
    elif name == "mooncake":
        wl = mooncake(params, spec.path, n, seed, limit, token_ids)
    elif name == "burstgpt":
        wl = burstgpt(params, spec.path, n, seed, limit, token_ids)
    else:
        gen = {
            "random": random_source,
            "prefix_repetition": prefix_repetition,
            "shared_prefix": shared_prefix,
            "text": text_source,
            "conversation": conversation,
        }[name]
        wl = gen(params, n, seed, token_ids)
        if limit is not None:
            _apply_limit(wl, limit, spec)
    if option_limit is not None:
        wl.params["context_limit"] = option_limit
    return wl


def with_lengths(spec: WorkloadSpec, input_len: int, output_len: int) -> WorkloadSpec:
    """``spec`` with a run's ``--input-len``/``--output-len`` as the defaults of the sources that take them."""
    if spec.name in ("random", "text"):
        return WorkloadSpec(spec.name, spec.path, {"input_len": input_len, "output_len": output_len, **spec.params})
    return spec


def _apply_limit(wl: Workload, limit: int, spec: WorkloadSpec) -> None:
    """Leave out (and count) the generated requests that would not fit in ``limit`` tokens."""
    keep = [s for s in wl.specs if s.prompt_len + s.output_len <= limit]
    dropped = len(wl.specs) - len(keep)
    if not dropped:
        return
    if not keep:
        raise WorkloadError(
            f"{spec.name}: no request left to send (all {dropped} are over the context limit of {limit} tokens)"
        )
    wl.skipped["over_context_limit"] = wl.skipped.get("over_context_limit", 0) + dropped
    for i, s in enumerate(keep):
        s.index = i
    wl.specs = keep
    wl.sha256 = prompt_set_sha256(keep)


def workload_of(summary_or_meta: Mapping[str, Any]) -> Dict[str, Any]:
    """A result's workload; results from before workloads existed sent random token ids."""
    wl = summary_or_meta.get("workload")
    if isinstance(wl, Mapping) and isinstance(wl.get("name"), str):
        return {"name": wl["name"], "params": dict(wl.get("params") or {}), "sha256": wl.get("sha256")}
    p = summary_or_meta.get("params")
    p = p if isinstance(p, Mapping) else {}
    return {
        "name": "random",
        "params": {k: p[k] for k in ("input_len", "output_len") if k in p},
        "sha256": None,
    }


def describe(wl: Mapping[str, Any]) -> str:
    """One line for a text header: ``sharegpt (output_len=None, ...) sha256 1a2b3c4d``."""
    params: Optional[Mapping[str, Any]] = wl.get("params")
    opts = ", ".join(f"{k}={v}" for k, v in sorted((params or {}).items()) if k != "file_sha256")
    sha = wl.get("sha256")
    line = f"{wl.get('name')}" + (f" ({opts})" if opts else "") + (f"  prompt set {str(sha)[:12]}" if sha else "")
    return visible(line)  # a result may come from a host: nothing in it may act on the terminal
