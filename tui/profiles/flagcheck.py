"""A launch flag judged against an engine release's flags, by argparse's own rules.

The table is the host's (its ``--help``, read by pre-flight) or tunedeck's for the release it
follows (``tunedeck.engines.release_flags``) when the host could not be asked; ``FlagTable.origin``
says which, and every message names it. The profile builder and pre-flight both judge here, so
a flag reads the same wherever it is checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunedeck.engine_flags import FlagTable


@dataclass(frozen=True, slots=True)
class FlagVerdict:
    """What the engine's argparse would make of one ``--flag[=value]``."""

    #: "ok" | "prefix" (accepted as ``full``) | "ambiguous" | "unknown" | "bad-choice"
    kind: str
    message: str = ""
    #: the full option string it selects (ok, prefix, bad-choice)
    full: str = ""
    #: the flag takes a value (ok, prefix, bad-choice)
    takes_value: bool = False
    #: the release's choices for it (empty: any value)
    choices: tuple[str, ...] = ()


def judge(table: FlagTable, option: str, value: str | None = None) -> FlagVerdict:
    """``option`` (``--name``) with its ``value`` (None: not given) against ``table``."""
    where = table.origin or f"{table.engine} {table.release}"
    r = table.resolve(option)
    if r.kind == "ambiguous":
        return FlagVerdict(
            "ambiguous",
            f"{option} is an ambiguous prefix in {where} (could be {', '.join(r.candidates)}): "
            "the engine exits with an argparse error",
        )
    if r.flag is None:
        hint = f"; did you mean {r.candidates[0]}?" if r.candidates else ""
        return FlagVerdict(
            "unknown", f"{option} is not a flag in {where}: the engine exits with an argparse error{hint}"
        )
    choices = r.flag.choices
    if value is not None and choices and value not in choices:
        return FlagVerdict(
            "bad-choice",
            f"{option}: {value!r} is not one of its choices in {where}: {', '.join(choices)}",
            r.name,
            r.flag.takes_value,
            choices,
        )
    if r.kind == "prefix":
        return FlagVerdict(
            "prefix",
            f"{option} is taken as {r.name} (argparse accepts an unambiguous prefix in {where}); write the full name",
            r.name,
            r.flag.takes_value,
            choices,
        )
    return FlagVerdict("ok", "", r.name, r.flag.takes_value, choices)


__all__ = ["FlagVerdict", "judge"]
