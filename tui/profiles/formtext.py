"""Text forms of profile tables for one-line form fields (and back), with typed flag values.

``NAME=VALUE NAME2='with spaces'`` for env and NCCL overrides; ``--flag=value --switch`` for the
flag table. Parsing returns the pairs and a list of ``(key, message)`` problems.
"""

from __future__ import annotations

import re
import shlex

from tunedeck.profiles.schema import FLAGS
from tunedeck.util.safety import ENV_NAME_RE


def env_to_text(pairs: tuple[tuple[str, str], ...]) -> str:
    return " ".join(f"{k}={shlex.quote(v) if v else ''}" for k, v in pairs)


def text_to_env(text: str, key: str) -> tuple[tuple[tuple[str, str], ...], list[tuple[str, str]]]:
    problems: list[tuple[str, str]] = []
    try:
        toks = shlex.split(text)
    except ValueError as e:
        return (), [(key, f"cannot split: {e}")]
    out: list[tuple[str, str]] = []
    for t in toks:
        name, eq, value = t.partition("=")
        if not eq:
            problems.append((key, f"{t!r} is not NAME=VALUE"))
        elif not ENV_NAME_RE.match(name):
            problems.append(
                (f"{key}.{name}", f"invalid environment variable name {name!r} (must match [A-Za-z_][A-Za-z0-9_]*)")
            )
        else:
            out.append((name, value))
    return tuple(out), problems


def flags_to_text(flags: tuple[tuple[str, bool | int | float | str], ...]) -> str:
    toks = []
    for name, v in flags:
        if v is True:
            toks.append(f"--{name}")
        elif v is False:
            continue
        else:
            toks.append(f"--{name}={v}")
    return shlex.join(toks)


def text_to_flags(
    text: str, engine: str
) -> tuple[tuple[tuple[str, bool | int | float | str], ...], list[tuple[str, str]]]:
    """``--flag=value`` / ``--switch`` tokens → typed pairs (types from the engine's schema)."""
    try:
        toks = shlex.split(text)
    except ValueError as e:
        return (), [("flags", f"cannot split: {e}")]
    schema = FLAGS.get(engine, {})
    out: list[tuple[str, bool | int | float | str]] = []
    problems: list[tuple[str, str]] = []
    for t in toks:
        m = re.match(r"^--([a-z0-9][a-z0-9-]*)(?:=(.*))?$", t, re.S)
        if not m:
            problems.append(("flags", f"{t!r} is not --flag or --flag=value"))
            continue
        name, value = m.group(1), m.group(2)
        spec = schema.get(name)
        if value is None:
            out.append((name, True))
            continue
        typed: bool | int | float | str = value
        if spec is not None and spec.type == "int":
            try:
                typed = int(value)
            except ValueError:
                pass
        elif spec is not None and spec.type == "float":
            try:
                typed = float(value)
            except ValueError:
                pass
        out.append((name, typed))
    return tuple(out), problems
