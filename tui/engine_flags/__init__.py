"""The engines' real launch flags as data: one table per release, derived from its own ``--help``.

A release's table is a data file of this package, ``tui/engine_flags/<engine>-<release>.txt``,
written by ``scripts/engine_flags.py`` from the release's ``--help`` output (a saved text or an
installed engine) with :func:`parse_help` and :func:`render_table`; nothing in it is typed by hand.
Each line is one argparse action: its option strings (aliases and ``--no-`` forms included), how
many values it takes and its choices. :func:`release_table` reads it with :func:`pkgutil.get_data`,
so it is found in a checkout, in an installed wheel (package data) and in the host-side zipapp.

Both sides that must agree read it: the simulated engines (``tunedeck.sim.engine_args``: every real flag
is accepted, the ones the simulator models are applied) and the profile checks
(``tunedeck.profiles``: names, prefixes and choices by argparse's own rules). Pre-flight parses the
host's ``--help`` with the same :func:`parse_help`, so the host's engine is the authority when its
help can be read. Constants and stdlib only: this ships in the host-side runtime (Python 3.9+).
"""

from __future__ import annotations

import pkgutil
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Set, Tuple

#: nargs as a table stores it: "" a switch (no value), "1" one value, "?" an optional value,
#: "+" one or more, "*" any number
NARGS = ("", "1", "?", "+", "*")

# an option line of argparse's help: two spaces, then the invocation, then 2+ spaces or the end
_OPTION_LINE = re.compile(r"^  (-{1,2}[A-Za-z0-9].*?)(?:\s{2,}|$)")
_NAME = re.compile(r"^-{1,2}[A-Za-z0-9][A-Za-z0-9_.-]*$")
_CHOICES = re.compile(r"^\{([^{}]*)\}$")
# vLLM shows a Literal's choices as a Python list metavar: ['auto', 'hf', 'mistral']
_LIST_CHOICES = re.compile(r"^\[('[^']*'(?:, '[^']*')*)\]$")


@dataclass(frozen=True)
class Flag:
    """One argparse action of a release."""

    #: the option strings, as ``--help`` lists them (``("--tp-size", "--tensor-parallel-size")``)
    names: Tuple[str, ...]
    #: one of :data:`NARGS`
    nargs: str = "1"
    #: the values argparse accepts; empty when any value is (a metavar, not ``{a,b}``)
    choices: Tuple[str, ...] = ()

    @property
    def takes_value(self) -> bool:
        return self.nargs != ""


@dataclass(frozen=True)
class Resolution:
    """What argparse makes of one ``--option`` (without its value)."""

    #: "exact" | "prefix" (an unambiguous abbreviation) | "ambiguous" | "unknown"
    kind: str
    #: the flag it selects (exact, prefix)
    flag: Optional[Flag] = None
    #: the full option string it selects (exact, prefix)
    name: str = ""
    #: ambiguous: every option string it could be; unknown: the closest real option string, if any
    candidates: Tuple[str, ...] = ()


@dataclass(frozen=True)
class FlagTable:
    """A release's flags, looked up the way its argparse does."""

    engine: str
    release: str
    flags: Tuple[Flag, ...]
    #: where the table comes from, for messages: "tunedeck's table of sglang 0.5.23", "the --help of …"
    origin: str = ""
    _by_name: Dict[str, Flag] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for f in self.flags:
            for n in f.names:
                self._by_name.setdefault(n, f)

    @property
    def names(self) -> Tuple[str, ...]:
        """Every option string, long and short."""
        return tuple(self._by_name)

    def get(self, name: str) -> Optional[Flag]:
        """The flag whose option string is exactly ``name`` (``--cpu-offload-gb``)."""
        return self._by_name.get(name)

    def choices(self, name: str) -> Tuple[str, ...]:
        f = self.get(name)
        return f.choices if f is not None else ()

    def resolve(self, option: str) -> Resolution:
        """``option`` (``--x`` or ``--x=value``) by argparse's rules: an exact option string; else a
        long option abbreviated to a prefix of exactly one option string; else ambiguous (more
        than one: argparse exits naming them) or unknown (the closest real name suggested)."""
        opt = option.split("=", 1)[0]
        f = self._by_name.get(opt)
        if f is not None:
            return Resolution("exact", f, opt)
        if opt.startswith("--"):
            cands = tuple(n for n in self._by_name if n.startswith(opt))
            if len(cands) == 1:
                return Resolution("prefix", self._by_name[cands[0]], cands[0])
            if len(cands) > 1:
                return Resolution("ambiguous", candidates=cands)
        import difflib  # only for a name that is not there: it costs every start otherwise

        longs = [n for n in self._by_name if n.startswith("--")]
        close = difflib.get_close_matches(opt, longs, n=1, cutoff=0.6)
        return Resolution("unknown", candidates=tuple(close))


# ------------------------------------------------------------------------------ help text → flags


def _parse_invocation(invocation: str) -> Optional[Flag]:
    names: List[str] = []
    nargs = ""
    choices: Tuple[str, ...] = ()
    for part in re.split(r", (?=-)", invocation):
        name, _, args = part.partition(" ")
        if not _NAME.match(name):
            return None
        names.append(name)
        if names[1:] and nargs:
            continue  # an alias repeats the first form's value spec
        args = args.strip()
        if not args:
            continue
        words = args.split(" ")
        if _LIST_CHOICES.match(args):
            nargs, spec = "1", args
        elif args.startswith("[") and args.endswith(" ...]"):
            nargs, spec = "*", args[1:].split(" ")[0]
        elif len(words) >= 2 and words[1].startswith("[") and args.endswith(" ...]"):
            nargs, spec = "+", words[0]
        elif args.startswith("[") and args.endswith("]") and " " not in args:
            nargs, spec = "?", args[1:-1]
        else:
            nargs, spec = "1", args
        m = _CHOICES.match(spec)
        lm = _LIST_CHOICES.match(spec)
        if m:
            choices = tuple(c for c in m.group(1).split(",") if c)
        elif lm:
            choices = tuple(c[1:-1] for c in lm.group(1).split(", "))
    return Flag(tuple(names), nargs, choices)


def parse_help(text: str) -> Tuple[Flag, ...]:
    """The flags of argparse ``--help`` output (several outputs concatenated: first one wins),
    in the order they are listed. Only option lines count (two spaces, then ``-``): argparse
    never wraps an invocation, so wrapped help text and the usage block are never read."""
    out: List[Flag] = []
    seen: Set[str] = set()
    for line in text.splitlines():
        m = _OPTION_LINE.match(line.rstrip())
        if not m:
            continue
        flag = _parse_invocation(m.group(1).strip())
        if flag is None or seen.intersection(flag.names):
            continue
        seen.update(flag.names)
        out.append(flag)
    return tuple(out)


def _line(f: Flag) -> str:
    for word in (*f.names, *f.choices):
        if not word or any(c.isspace() for c in word) or ("," in word and word in f.names):
            raise ValueError(f"{f.names[0]}: {word!r} cannot be stored in a flag table")
    return " ".join((",".join(f.names), f.nargs or "0", *f.choices))


def render_table(engine: str, release: str, flags: Iterable[Flag], source: str) -> str:
    """The data file ``scripts/engine_flags.py`` writes for one release: a ``#`` header that says
    where it comes from, then the flags, one action a line (``names,comma,separated NARGS CHOICE…``,
    nargs ``0`` for a switch)."""
    return "\n".join(
        [
            f"# {engine} {release}: its launch flags as its own --help lists them.",
            f"# Generated by scripts/engine_flags.py from `{source}`; do not edit (run the script again).",
            "# One argparse action a line: option strings (comma-separated), nargs (0: a switch), choices.",
            *(_line(f) for f in flags),
            "",
        ]
    )


def parse_table(text: str) -> Tuple[Flag, ...]:
    """The flags of a table's text (:func:`render_table`'s), in its order."""
    out: List[Flag] = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            names, nargs, *choices = line.split(" ")
            out.append(Flag(tuple(names.split(",")), "" if nargs == "0" else nargs, tuple(choices)))
    return tuple(out)


_FILE_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def table_file(engine: str, release: str) -> str:
    """``sglang-0.5.23.txt``: the name of a release's table in this package's folder; ValueError
    for an engine or release that cannot be part of a file name."""
    for part in (engine, release):
        if not _FILE_PART.fullmatch(part):
            raise ValueError(f"{part!r} cannot name a flag table (letters, digits and . _ + - only)")
    return f"{engine}-{release}.txt"


_TABLES: Dict[Tuple[str, str], FlagTable] = {}


def release_table(engine: str, release: str) -> FlagTable:
    """The committed table of ``engine`` ``release``; FileNotFoundError when tunedeck has none."""
    key = (engine, release)
    t = _TABLES.get(key)
    if t is None:
        name = table_file(engine, release)
        try:
            data = pkgutil.get_data(__name__, name)
        except OSError as e:  # zipimport says OSError, a folder FileNotFoundError
            raise FileNotFoundError(f"tunedeck has no flag table of {engine} {release} ({name}: {e})") from None
        if data is None:
            raise FileNotFoundError(f"{name}: {__name__} is loaded from where data files cannot be read")
        flags = parse_table(data.decode("utf-8"))
        t = _TABLES[key] = FlagTable(engine, release, flags, origin=f"tunedeck's table of {engine} {release}")
    return t


__all__ = [
    "NARGS",
    "Flag",
    "FlagTable",
    "Resolution",
    "parse_help",
    "parse_table",
    "release_table",
    "render_table",
    "table_file",
]
