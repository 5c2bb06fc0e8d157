"""Argument parsers that mirror SGLang 0.5.23 and vLLM 0.33 (flags, choices, help, argparse errors).

A pre-flight can probe them exactly like the real engines:

- SGLang: ``tunedeck sim sglang --help`` contains ``--attention-backend {triton,torch_native,...}``
  (regex ``--attention-backend \\{([^}]*)\\}``) and every flag name.
- vLLM: ``--attention-backend`` is enum-typed, so ``--help`` lists no choices; the registry probe
  (``python -c "from vllm.v1.attention.backends.registry import AttentionBackendEnum as E; ..."``)
  is answered by ``tunedeck sim vllm --sim-list-backends``: the member names, space-separated, one line.

Every flag of the release (``tunedeck.engine_flags``: names, aliases, ``--no-``/``--disable-`` forms,
choices, as its ``--help`` lists them) is accepted with argparse's own rules and errors: a flag the
release does not have, an ambiguous prefix or a choice it does not list ends the start as the
engine's argparse does. The flags the simulator models are declared with their types and defaults
in :mod:`tunedeck.sim.sglang_args` and :mod:`tunedeck.sim.vllm_args` (one row each, added by
:func:`add_modeled`) and applied; every other one is collected
in ``sim_accepted`` and logged at start-up as "accepted, not simulated". Simulator-only options all
start with ``--sim-``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Iterable, Mapping, Sequence, Tuple

from tunedeck.engine_flags import FlagTable
from tunedeck.engines import VLLM_ATTENTION_BACKENDS

SGLANG_ALIASES = {"nsa": "dsa", "compressed": "dsv4", "tokenspeed_mla": "cutedsl_mla"}

#: vLLM 0.33 ``AttentionBackendEnum`` names (``tunedeck.engines``, the one table the profiles share)
VLLM_BACKENDS = list(VLLM_ATTENTION_BACKENDS)
VLLM_CUDAGRAPH_MODES = ["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]

SIM_FAULTS = ["oom", "nccl", "port", "hang", "crash"]


class CaseInsensitiveChoices(list[str]):
    """Choices that match any case (vLLM parses AttentionBackendEnum names case-insensitively)."""

    def __contains__(self, item: object) -> bool:
        return isinstance(item, str) and item.upper() in (c.upper() for c in self)


def _env_float(name: str, default: float) -> float:
    v = os.environ.get(name)
    if not v:
        return default
    try:
        return float(v)
    except ValueError:
        return default


def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {s!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {s!r}")
    return v


def _speed(s: str) -> float:
    v = _positive_float(s)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {s!r}")
    return v


def _negates(first: str, name: str) -> bool:
    """``--no-X`` for ``--X``, ``--disable-Y`` for ``--enable-Y`` and back: the switch's off form."""
    body = first[2:]
    if name == f"--no-{body}":
        return True
    for on, off in (("enable-", "disable-"), ("disable-", "enable-")):
        if body.startswith(on) and name == f"--{off}{body[len(on) :]}":
            return True
    return False


class _Toggle(argparse.Action):
    """A switch with its off form (``--enable-x`` / ``--disable-x``, ``--x`` / ``--no-x``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, not _negates(self.option_strings[0], option_string or ""))


class _Accepted(argparse.Action):
    """A real flag the simulator does not model: parsed (nargs, choices) and remembered."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        if values is None:
            vals: tuple[str, ...] = ()
        elif isinstance(values, list):
            vals = tuple(str(v) for v in values)
        else:
            vals = (str(values),)
        seen = list(getattr(namespace, self.dest, None) or [])
        seen.append((option_string or self.option_strings[0], vals))
        setattr(namespace, self.dest, seen)


_NARGS: dict[str, Any] = {"": 0, "1": None, "?": "?", "+": "+", "*": "*"}

#: a flag the simulator models: its option string (the release's first), the type of its value
#: (``bool``: a switch), its default and its help; the release's table adds its aliases and choices
Modeled = Tuple[str, Any, Any, str]


def add_modeled(
    container: Any, table: FlagTable, flags: Iterable[Modeled], more: Mapping[str, Mapping[str, Any]] | None = None
) -> None:
    """``add_argument`` on ``container`` (the parser or a group) for each flag the simulator models,
    with the release's option strings (all its aliases), number of values and choices. ``more`` adds
    keywords to a few by name (``sim_choices``: the simulator's own check where the release lists none). A flag
    the release lacks, or a switch that it gives a value (or the reverse), fails here."""
    for name, type_, default, help_ in flags:
        flag = table.get(name)
        if flag is None:
            raise ValueError(f"the simulator models {name}, which {table.engine} {table.release} does not have")
        if (type_ is bool) == flag.takes_value:
            raise ValueError(
                f"the simulator models {name} as a {'switch' if type_ is bool else 'value'}, "
                f"which it is not in {table.engine} {table.release}"
            )
        kw = dict((more or {}).get(name, {}))
        sim_choices = kw.pop("sim_choices", None)
        if type_ is bool:  # the release's off form (--disable-x, --no-x) too, when it has one
            kw["action"] = _Toggle if len(flag.names) > 1 else "store_true"
        else:
            kw["type"] = type_
            if flag.nargs in ("?", "+", "*"):  # as many values as the release takes (vLLM's --api-key K1 K2)
                kw.setdefault("nargs", _NARGS[flag.nargs])
            if flag.choices:
                kw["choices"] = [type_(c) for c in flag.choices] if type_ in (int, float) else list(flag.choices)
            elif sim_choices is not None:
                kw["choices"] = sim_choices
        container.add_argument(*flag.names, default=default, help=help_, **kw)


def accept_rest(p: argparse.ArgumentParser, table: FlagTable) -> None:
    """Every flag of the release the simulator does not model: accepted, checked, remembered."""
    g = p.add_argument_group("accepted, not simulated", f"{table.engine} {table.release} flags the simulator ignores")
    taken = p._option_string_actions
    for flag in table.flags:
        if any(n in taken for n in flag.names):
            continue
        g.add_argument(
            *flag.names,
            action=_Accepted,
            nargs=_NARGS[flag.nargs],
            choices=list(flag.choices) or None,
            dest="sim_accepted",
            default=None,
            help="accepted, not simulated",
        )


def add_sim_args(p: argparse.ArgumentParser, engine: str) -> None:
    g = p.add_argument_group("simulator (tunedeck sim only)")
    g.add_argument(
        "--sim-load-seconds",
        type=_positive_float,
        default=_env_float("TUNEDECK_SIM_LOAD_S", 20.0),
        help="Seconds from start to ready (env TUNEDECK_SIM_LOAD_S; default 20).",
    )
    g.add_argument(
        "--sim-fault",
        choices=SIM_FAULTS,
        default=None,
        help="End the start-up like a real failure; crash: serve, then die of a CUDA error "
        "(after --sim-crash-after seconds).",
    )
    g.add_argument(
        "--sim-crash-after",
        type=_positive_float,
        default=_env_float("TUNEDECK_SIM_CRASH_AFTER_S", 3.0),
        help="With --sim-fault crash: seconds of serving before the crash (env TUNEDECK_SIM_CRASH_AFTER_S; default 3).",
    )
    g.add_argument("--sim-seed", type=int, default=0, help="Seed for noise, token text and pseudo-EOS.")
    g.add_argument("--sim-speed", type=_speed, default=1.0, help="Time scale: every simulated duration / X.")
    g.add_argument(
        "--sim-record-timestamps",
        metavar="PATH",
        default=None,
        help="Append one JSON line per finished request: id, arrival, token write times (epoch s).",
    )
    g.add_argument("--sim-fixed-ttft-ms", type=_positive_float, default=None, help="Fixed TTFT, bypassing the model.")
    g.add_argument("--sim-fixed-itl-ms", type=_positive_float, default=None, help="Fixed inter-token delay.")
    g.add_argument("--sim-gpu-start", type=int, default=None, help="First simulated GPU index used.")
    g.add_argument("--sim-stats-interval", type=_positive_float, default=None, help=argparse.SUPPRESS)
    if engine == "vllm":
        g.add_argument(
            "--sim-list-backends",
            action="store_true",
            help="Print AttentionBackendEnum member names (the registry probe) and exit.",
        )


def help_search(parser: argparse.ArgumentParser, keyword: str) -> str:
    """``vllm serve --help=<keyword>``: the groups or options whose name matches."""
    kw = keyword.lower()
    if kw == "all":
        return parser.format_help()
    lines = []
    for g in parser._action_groups:
        if g.title and g.title.lower() == kw:
            f = parser._get_formatter()
            f.start_section(g.title)
            f.add_text(g.description)
            f.add_arguments(g._group_actions)
            f.end_section()
            return f.format_help()
    for act in parser._actions:
        if any(kw in s.lower() for s in act.option_strings):
            lines.append(f"  {', '.join(act.option_strings)}\n      {act.help or ''}")
    if not lines:
        return f"No group or parameter matching '{keyword}'\n"
    return "Parameters matching '" + keyword + "':\n\n" + "\n".join(lines) + "\n"
