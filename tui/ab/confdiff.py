"""What differs between two servers' configurations: flags (``--x v`` / ``--x=v``) and environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from tunedeck.util.safety import redact_env

MINUS = "\u2212"


@dataclass(frozen=True)
class ConfigChange:
    kind: str  # "flag" | "env" | "command"
    name: str
    a: str | None  # None: absent on A
    b: str | None

    @property
    def text(self) -> str:
        if self.kind == "unknown":
            return f"? {self.name}: {self.a if self.a is not None else self.b}"
        if self.a is None:
            return f"+ {self.name}{'' if self.b == '' else '=' + str(self.b)}  (only B)"
        if self.b is None:
            return f"{MINUS} {self.name}{'' if self.a == '' else '=' + str(self.a)}  (only A)"
        return f"~ {self.name}: {self.a} \u2192 {self.b}"


def parse_flags(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Split argv into the leading command words and ``{--flag: value}`` ('' for a switch)."""
    prefix: list[str] = []
    flags: dict[str, str] = {}
    i = 0
    argv = list(argv)
    while i < len(argv) and not _is_opt(argv[i]):
        prefix.append(argv[i])
        i += 1
    positional: list[str] = []
    while i < len(argv):
        tok = argv[i]
        if _is_opt(tok):
            if "=" in tok:
                k, v = tok.split("=", 1)
            elif i + 1 < len(argv) and not _is_opt(argv[i + 1]):
                k, v = tok, argv[i + 1]
                i += 1
            else:
                k, v = tok, ""
            flags[k] = f"{flags[k]},{v}" if k in flags else v
        else:
            positional.append(tok)
        i += 1
    if positional:
        prefix += positional
    return prefix, flags


def _is_opt(tok: str) -> bool:
    if not tok.startswith("-") or tok == "-":
        return False
    try:
        float(tok)
        return False
    except ValueError:
        return True


def config_diff(
    a_argv: Sequence[str],
    a_env: Mapping[str, str],
    b_argv: Sequence[str],
    b_env: Mapping[str, str],
) -> list[ConfigChange]:
    """Flags and environment variables that differ between two server commands.

    A side whose bench did not record the server's command has an empty ``argv``: its flags and
    environment are unknown, so nothing is listed as different; one "unknown" entry says so."""
    out: list[ConfigChange] = []
    missing = [s for s, argv in (("A", a_argv), ("B", b_argv)) if not argv]
    if missing:
        who = " and ".join(missing)
        return [
            ConfigChange(
                "unknown",
                "server command",
                f"unknown (not recorded for {who}): flags and environment cannot be compared",
                None,
            )
        ]
    pa, fa = parse_flags(a_argv)
    pb, fb = parse_flags(b_argv)
    if pa != pb and (pa or pb):
        out.append(ConfigChange("command", "command", " ".join(pa), " ".join(pb)))
    for k in sorted(set(fa) | set(fb)):
        va, vb = fa.get(k), fb.get(k)
        if va != vb:
            out.append(ConfigChange("flag", k, va, vb))
    ea, eb = redact_env(dict(a_env)), redact_env(dict(b_env))
    for k in sorted(set(ea) | set(eb)):
        va, vb = ea.get(k), eb.get(k)
        if va != vb:
            out.append(ConfigChange("env", k, va, vb))
    return out
