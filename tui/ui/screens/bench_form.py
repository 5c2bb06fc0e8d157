"""The Bench setup screen's form as a :class:`~tunedeck.bench.plan.BenchPlan`: its values as typed
(:class:`BenchForm`), each field checked as the command line would check it, a bad one named
(:class:`BenchFormError`); the options field takes the workload sources' own options and nothing
else."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from tunedeck.bench.httpcore import InvalidURL, split_url
from tunedeck.bench.metrics import parse_slo_ms
from tunedeck.bench.plan import BenchPlan
from tunedeck.bench.workloads import FILE_SOURCES, SOURCES
from tunedeck.model import ServerStats


class BenchFormError(ValueError):
    """A form field that cannot become a ``tunedeck bench`` argument (``field`` names it)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class BenchForm:
    """The form's values, as typed."""

    url: str = ""
    #: the workload source (``--dataset-name``), its file, and more of its options as typed flags
    dataset: str = "random"
    dataset_path: str = ""
    options: str = ""
    endpoint: str = "completions"
    concurrency: str = "1,16"
    num_prompts: str = ""
    input_len: str = "128"
    output_len: str = "128"
    warmup: str = "1"
    ignore_eos: bool = True
    #: goodput targets in ms, as typed ("" = no target on that metric)
    slo_ttft: str = ""
    slo_tpot: str = ""
    slo_itl: str = ""
    slo_e2el: str = ""


#: (goodput key, form field, the field's name in messages) of the SLO fields, in form order
SLO_FIELDS = (
    ("ttft", "slo_ttft", "TTFT SLO"),
    ("tpot", "slo_tpot", "TPOT SLO"),
    ("itl", "slo_itl", "ITL SLO"),
    ("e2el", "slo_e2el", "E2EL SLO"),
)


def goodput_items(form: BenchForm) -> tuple[tuple[str, float], ...]:
    """The goodput targets (``("ttft", 200.0)``) of the form's SLO fields, checked by the parser the
    ``--goodput`` option uses; a bad value raises :class:`BenchFormError` naming its field."""
    items = []
    for key, attr, name in SLO_FIELDS:
        text = str(getattr(form, attr)).strip()
        if not text:
            continue
        try:
            items.append((key, parse_slo_ms(text)))
        except ValueError as e:
            raise BenchFormError(name, str(e)) from None
    return tuple(items)


#: sources that take --input-len/--output-len (the others set their own lengths)
SIZED_BY_FORM = frozenset({"random", "text", "conversation"})


def workload_option_types() -> dict[str, Any]:
    """The flags the form's options field takes, each with its value type: every source option of
    ``tunedeck bench``."""
    from tunedeck.commands._argtypes import pos_int
    from tunedeck.commands._workload import WORKLOAD_OPTIONS

    return {flag: typ for flag, _sources, _key, typ, _text in WORKLOAD_OPTIONS} | {"--context-limit": pos_int}


def option_values(text: str) -> dict[str, Any]:
    """The options field as ``{flag: value}`` of workload options only (the form must not reach the
    server choice, the output files or anything else), each value checked by its option's type (a
    flag given twice: the last); BenchFormError otherwise."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise BenchFormError("options", str(e)) from None
    types = workload_option_types()
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        flag, _eq, value = words[i].partition("=")
        if flag not in types:
            raise BenchFormError("options", f"{flag!r} is not a workload option (e.g. --gsp-num-groups 8)")
        if not _eq:
            if i + 1 >= len(words):
                raise BenchFormError("options", f"{flag} needs a value")
            value = words[i + 1]
            i += 1
        try:
            out[flag] = types[flag](value)
        except ValueError as e:
            raise BenchFormError("options", f"{flag} {e}") from None
        i += 1
    return out


def _int(field: str, text: str, minimum: int) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        raise BenchFormError(field, f"expected a whole number, got {text.strip()!r}") from None
    if v < minimum:
        raise BenchFormError(field, f"must be >= {minimum}")
    return v


def _where(form: BenchForm, server: ServerStats | None, target: str | None, demo: bool) -> dict[str, Any]:
    """The plan's server: the form's URL, else the selected server's port on the app's host."""
    url = form.url.strip()
    if url:
        try:
            split_url(url)  # as the benchmark's client will read it
        except InvalidURL as e:
            raise BenchFormError("url", str(e)) from None
        return {"url": url}
    if server is None:
        raise BenchFormError("server", "select a server (or type a URL)")
    if server.port is None:
        raise BenchFormError("server", f"{server.name} has no known port")
    where: dict[str, Any] = {"demo": True} if demo else {"host": target} if target and target != "local" else {}
    where["port"] = server.port
    if server.name and re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", server.name) and server.run_id != server.name:
        where["profile"] = server.name
    return where


def bench_plan(form: BenchForm, server: ServerStats | None, *, target: str | None, demo: bool) -> BenchPlan:
    """The :class:`~tunedeck.bench.plan.BenchPlan` of the form and the selected server.

    A URL in the form wins; else the server's port on the app's host: ``--demo`` for the
    simulator, ``--host TARGET`` for a remote host (the bench forwards the port itself), no
    host option for the local machine. Raises :class:`BenchFormError` naming the field.
    """
    from tunedeck.commands._workload import WORKLOAD_OPTIONS, dataset_file, plan_workload

    where = _where(form, server, target, demo)
    if form.dataset not in SOURCES:
        raise BenchFormError("workload", f"{form.dataset!r}: expected one of {', '.join(SOURCES)}")
    path = None
    if form.dataset in FILE_SOURCES:
        path = form.dataset_path.strip()
        if not path:
            raise BenchFormError("dataset file", f"{form.dataset} reads a file: give its path")
    options = option_values(form.options)
    if form.endpoint not in ("completions", "chat"):
        raise BenchFormError("endpoint", f"{form.endpoint!r}: expected completions or chat")
    conc = [c.strip() for c in form.concurrency.split(",") if c.strip()]
    if not conc:
        raise BenchFormError("concurrency", "give at least one value, e.g. 1,16")
    concurrency = tuple(_int("concurrency", c, 1) for c in conc)
    num_prompts = _int("num prompts", form.num_prompts, 1) if form.num_prompts.strip() else None
    sized = form.dataset in SIZED_BY_FORM
    plan = BenchPlan(
        **where,
        dataset_name=form.dataset,
        dataset_path=dataset_file(path),
        workload_options=tuple((flag, options[flag]) for flag, *_rest in WORKLOAD_OPTIONS if flag in options),
        context_limit=options.get("--context-limit"),
        endpoint=form.endpoint,
        concurrency=concurrency,
        num_prompts=num_prompts,
        input_len=_int("input len", form.input_len, 1) if sized else None,
        output_len=_int("output len", form.output_len, 1) if sized else None,
        warmup=_int("warmup", form.warmup, 0),
        ignore_eos=form.ignore_eos,
        goodput=goodput_items(form),
    )
    try:
        plan_workload(plan)
    except ValueError as e:
        raise BenchFormError("options", str(e)) from None
    return plan


__all__ = [
    "SIZED_BY_FORM",
    "SLO_FIELDS",
    "BenchForm",
    "BenchFormError",
    "bench_plan",
    "goodput_items",
    "option_values",
    "workload_option_types",
]
