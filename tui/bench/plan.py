"""What a ``tunedeck bench`` run is asked to do, typed (:class:`BenchPlan`): the command line builds
one from its parsed options, the Bench screen from its form, and both start or preview it through
the same functions (``tunedeck.commands.bench``). :meth:`BenchPlan.to_argv` writes the equivalent
command line for display; parsing it gives the same plan back."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, Tuple, Union

#: how :meth:`BenchPlan.to_argv` writes a field: ``value`` (``--flag VALUE``), ``list`` (comma-joined
#: values), ``items`` (``--flag ITEM ...``), ``flag`` (present when true), ``no`` (``--no-FLAG``
#: when false), ``either`` (``--FLAG`` / ``--no-FLAG``, absent when None), ``pairs`` (the workload
#: options: each its own flag)
_KINDS = ("value", "list", "items", "flag", "no", "either", "pairs")

Number = Union[int, float]


def _opt(flag: str, kind: str = "value", always: bool = False) -> Dict[str, Any]:
    """A field's command-line spelling; ``always``: written even at its default (the form shows it)."""
    assert kind in _KINDS, kind
    return {"flag": flag, "kind": kind, "always": always}


def num_text(v: Number) -> str:
    """A number as the options read it back exactly: ``8``, ``0.5``, ``2500.5``, ``inf``."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return repr(v) if isinstance(v, float) else str(v)


def _word(text: str) -> bool:
    """``text`` can follow its flag as a separate word (argparse would read one starting with ``-``
    as another option, and drops nothing from ``--flag=``)."""
    return bool(text) and not text.startswith("-")


@dataclass(frozen=True)
class BenchPlan:
    """Every setting of one benchmark (``tunedeck bench``'s options, docs/cli.md), in the order the
    equivalent command line shows them. None: the option's default (the run decides)."""

    # where: a URL (the client runs here), or a port on --host/--demo, or a deployment's head
    url: Optional[str] = field(default=None, metadata=_opt("--url"))
    demo: bool = field(default=False, metadata=_opt("--demo", "flag"))
    host: Optional[str] = field(default=None, metadata=_opt("--host"))
    port: Optional[int] = field(default=None, metadata=_opt("--port"))
    deployment: Optional[str] = field(default=None, metadata=_opt("--deployment"))
    profile: Optional[str] = field(default=None, metadata=_opt("--profile"))
    # the workload source and its own options ((flag, value), in WORKLOAD_OPTIONS order)
    dataset_name: str = field(default="random", metadata=_opt("--dataset-name"))
    dataset_path: Optional[str] = field(default=None, metadata=_opt("--dataset-path"))
    workload_options: Tuple[Tuple[str, Number], ...] = field(default=(), metadata=_opt("", "pairs"))
    context_limit: Optional[int] = field(default=None, metadata=_opt("--context-limit"))
    endpoint: str = field(default="completions", metadata=_opt("--endpoint", always=True))
    # the levels: a sweep over one of these lists; () the default (C=1, or unbounded with a rate)
    concurrency: Tuple[int, ...] = field(default=(), metadata=_opt("--concurrency", "list"))
    request_rate: Tuple[float, ...] = field(default=(), metadata=_opt("--request-rate", "list"))
    num_prompts: Optional[int] = field(default=None, metadata=_opt("--num-prompts"))
    input_len: Optional[int] = field(default=None, metadata=_opt("--input-len"))
    output_len: Optional[int] = field(default=None, metadata=_opt("--output-len"))
    warmup: int = field(default=1, metadata=_opt("--warmup", always=True))
    ignore_eos: Optional[bool] = field(default=None, metadata=_opt("ignore-eos", "either"))
    #: goodput SLOs in ms: (ttft|tpot|itl|e2el, ms), in the order given
    goodput: Tuple[Tuple[str, float], ...] = field(default=(), metadata=_opt("--goodput", "items"))
    model: Optional[str] = field(default=None, metadata=_opt("--model"))
    ready_timeout: float = field(default=120.0, metadata=_opt("--ready-timeout"))
    burstiness: float = field(default=1.0, metadata=_opt("--burstiness"))
    temperature: float = field(default=0.0, metadata=_opt("--temperature"))
    seed: int = field(default=0, metadata=_opt("--seed"))
    percentiles: Tuple[float, ...] = field(default=(90.0, 99.0), metadata=_opt("--metric-percentiles", "list"))
    # the capacity search (--capacity --slo ...)
    capacity: bool = field(default=False, metadata=_opt("--capacity", "flag"))
    slo: Tuple[str, ...] = field(default=(), metadata=_opt("--slo", "items"))
    capacity_max: int = field(default=1024, metadata=_opt("--capacity-max"))
    capacity_steps: int = field(default=8, metadata=_opt("--capacity-steps"))
    # the client
    workers: int = field(default=1, metadata=_opt("--workers"))
    preconnect: bool = field(default=True, metadata=_opt("preconnect", "no"))
    read_timeout: float = field(default=600.0, metadata=_opt("--read-timeout"))
    request_timeout: Optional[float] = field(default=None, metadata=_opt("--request-timeout"))
    client_where: Optional[str] = field(default=None, metadata=_opt("--client-where"))
    python: Optional[str] = field(default=None, metadata=_opt("--python"))
    # the output
    label: Optional[str] = field(default=None, metadata=_opt("--label"))
    meta_json: Optional[str] = field(default=None, metadata=_opt("--meta-json"))
    progress: bool = field(default=False, metadata=_opt("--progress", "flag"))
    progress_samples: bool = field(default=False, metadata=_opt("--progress-samples", "flag"))
    #: ``--json``: "-" for stdout, else a file
    json: Optional[str] = field(default=None, metadata=_opt("--json"))
    preview: bool = field(default=False, metadata=_opt("--preview", "flag"))

    # ------------------------------------------------------------------ what the run does
    @property
    def target(self) -> str:
        """Where the server is, in the words a result's meta records: ``demo``, the host, or ``local``."""
        return "demo" if self.demo else (self.host or "local")

    def concurrency_levels(self) -> List[int]:
        """The concurrency list the run sweeps: the option's, else 1 (none with a request rate)."""
        return list(self.concurrency) or ([] if self.request_rate else [1])

    def rate_levels(self) -> List[float]:
        """The request-rate list the run sweeps: the option's, else all at once."""
        return list(self.request_rate) or [math.inf]

    def goodput_ms(self) -> Dict[str, float]:
        return dict(self.goodput)

    def check(self) -> None:
        """ValueError with one line naming the options that do not go together (each value's own
        check is its parser's)."""
        if len(self.concurrency) > 1 and len(self.request_rate) > 1:
            raise ValueError("sweep over --concurrency or over --request-rate, not both")
        if not (self.capacity or self.slo):
            return
        if not self.capacity:
            raise ValueError("--slo is the target of --capacity: add --capacity (goodput targets are --goodput)")
        if not self.slo:
            raise ValueError("--capacity needs --slo METRIC:BOUND ..., e.g. --slo ttft_p90:500 tpot_p90:50")
        if self.concurrency or self.request_rate:
            raise ValueError("--capacity chooses each level's concurrency itself: drop --concurrency/--request-rate")
        if not self.url:
            raise ValueError("--capacity runs the client here, against --url (e.g. --url http://127.0.0.1:PORT)")

    def check_target(self) -> None:
        """ValueError with one line when the plan names no server, or two ways to reach it."""
        if self.url:
            if self.host is not None or self.demo:
                raise ValueError("give either --url or --host/--demo with --port, not both")
            if self.client_where == "host":
                raise ValueError("--client-where host needs --host/--demo and --port (with --url the client runs here)")
        elif self.port is None:
            raise ValueError("need --url URL, or --port P with --host/--demo")

    # ------------------------------------------------------------------ the command line
    def to_argv(self) -> List[str]:
        """The ``tunedeck bench`` arguments of this plan (for display: ``tunedeck bench`` parses them
        into an equal plan). Options at their default are left out, except those the form always shows."""
        out: List[str] = []
        for f in fields(self):
            v = getattr(self, f.name)
            meta = f.metadata
            if v == f.default and not (meta["always"] and v is not None):
                continue
            out += _spell(meta["flag"], meta["kind"], v)
        return out


def _spell(flag: str, kind: str, v: Any) -> List[str]:
    """One field's words on the command line (:data:`_KINDS`)."""
    if kind == "flag":
        return [flag] if v else []
    if kind in ("no", "either"):
        return [f"--{flag}" if v else f"--no-{flag}"]
    if kind == "pairs":
        return [w for name, x in v for w in _value(name, num_text(x))]
    if kind == "list":
        return _value(flag, ",".join(num_text(x) for x in v))
    if kind == "items":
        items = [f"{k}:{num_text(x)}" for k, x in v] if flag == "--goodput" else list(v)
        return [flag, *items]
    return _value(flag, v if isinstance(v, str) else num_text(v))


def _value(flag: str, text: str) -> List[str]:
    return [flag, text] if _word(text) else [f"{flag}={text}"]


__all__ = ["BenchPlan", "num_text"]
