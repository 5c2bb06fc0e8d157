"""Benchmark plans for A/B runs: what load to put on each server.

A plan is a small TOML file::

    name = "quick"
    description = "..."
    endpoint = "completions"        # or "chat"
    input_len = 128                 # prompt tokens
    output_len = 64                 # generated tokens per request
    ignore_eos = true               # always explicit (benchmark-metrics.md §6.2)
    temperature = 0.0
    seed = 1
    warmup = 2                      # warmup requests per level, excluded from results

    [[level]]                       # one benchmark per level, in order
    label = "single-stream"         # optional
    concurrency = 1
    num_prompts = 4
    # any of input_len/output_len/warmup/request_rate may be overridden per level

    [workload]                      # optional: which requests (docs/workloads.md); random token ids if absent
    name = "shared_prefix"          # a --dataset-name
    num_groups = 8                  # that source's options, by their plain names
    # path = "conversations.json"   # a file source's file (relative to the plan's folder)

Where plans come from, first match wins: a path to a ``.toml`` file; the
user's ``<config>/tunedeck/plans/NAME.toml``; ``$TUNEDECK_PLANS_DIR/NAME.toml``;
the shipped ``profiles/plans/NAME.toml`` (``quick``, ``default``, ``sweep``, and the
production-like ``chat`` (conversations), ``rag`` (long prompts sharing prefixes) and
``spec-check`` (natural text for speculative decoding)).

Errors raise :class:`PlanError` naming the file, the key and (when it can be
found) the line.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import tomllib

from tunedeck.ab.plan import Plan, PlanError, PlanLevel
from tunedeck.bench.workloads import FILE_SOURCES, OPTIONS, SOURCES, WorkloadSpec
from tunedeck.util.paths import config_dir

BUILTIN_PLANS = ("quick", "default", "sweep", "chat", "rag", "spec-check")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

_TOP_KEYS = {
    "name": str,
    "description": str,
    "endpoint": str,
    "input_len": int,
    "output_len": int,
    "ignore_eos": bool,
    "temperature": float,
    "seed": int,
    "warmup": int,
    "request_rate": float,
    "workload": dict,
    "level": list,
}
_LEVEL_KEYS = {
    "label": str,
    "concurrency": int,
    "num_prompts": int,
    "input_len": int,
    "output_len": int,
    "warmup": int,
    "request_rate": float,
}
_REQUIRED_TOP = ("input_len", "output_len", "ignore_eos")
ENDPOINTS = ("completions", "chat")


# ---------------------------------------------------------------------- discovery


def builtin_plans_dir() -> Path:
    """The shipped plans: ``tunedeck/builtin_profiles/plans`` in a wheel, ``profiles/plans`` in a checkout."""
    here = Path(__file__).resolve().parent.parent
    wheel = here / "builtin_profiles" / "plans"
    if wheel.is_dir():
        return wheel
    return here.parent / "profiles" / "plans"


def user_plans_dir() -> Path:
    return config_dir() / "plans"


def plan_dirs() -> list[Path]:
    dirs = [user_plans_dir()]
    extra = os.environ.get("TUNEDECK_PLANS_DIR")
    if extra:
        dirs.append(Path(extra))
    dirs.append(builtin_plans_dir())
    return dirs


def list_plans() -> list[tuple[str, Path]]:
    seen: dict[str, Path] = {}
    for d in plan_dirs():
        if d.is_dir():
            for p in sorted(d.glob("*.toml")):
                seen.setdefault(p.stem, p)
    return sorted(seen.items())


def find_plan(name: str) -> Path:
    if name.endswith(".toml") or os.sep in name:
        p = Path(name)
        if not p.is_file():
            raise PlanError(name, "no such plan file")
        return p
    if not NAME_RE.match(name):
        raise PlanError(name, "invalid plan name (letters, digits, '.', '_', '-')")
    for d in plan_dirs():
        p = d / f"{name}.toml"
        if p.is_file():
            return p
    known = ", ".join(n for n, _ in list_plans()) or "none"
    raise PlanError(name, f"no plan with this name (known: {known})")


def load_plan(name_or_path: str) -> Plan:
    return parse_plan_file(find_plan(name_or_path))


def parse_plan_file(path: str | os.PathLike[str]) -> Plan:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PlanError(str(path), f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise PlanError(str(path), "not UTF-8 text") from None
    return parse_plan_text(text, source=str(path), default_name=path.stem)


# ---------------------------------------------------------------------- parsing


def _line_of(text: str, key: str, nth: int = 0) -> int | None:
    """Best-effort line number of ``key =`` (the nth occurrence) for error messages."""
    pat = re.compile(rf"^[ \t]*{re.escape(key)}[ \t]*=", re.MULTILINE)
    for i, m in enumerate(pat.finditer(text)):
        if i == nth:
            return text.count("\n", 0, m.start()) + 1
    return None


def _level_line(text: str, idx: int) -> int | None:
    pat = re.compile(r"^[ \t]*\[\[[ \t]*level[ \t]*\]\]", re.MULTILINE)
    for i, m in enumerate(pat.finditer(text)):
        if i == idx:
            return text.count("\n", 0, m.start()) + 1
    return None


def _key_line_in_level(text: str, idx: int, key: str) -> int | None:
    start = _level_line(text, idx)
    if start is None:
        return None
    lines = text.splitlines()
    for n in range(start, len(lines)):
        s = lines[n].strip()
        if s.startswith("["):
            break
        if re.match(rf"{re.escape(key)}\s*=", s):
            return n + 1
    return start


def _check_type(value: Any, typ: type, src: str, key: str, line: int | None) -> Any:
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PlanError(src, f"expected a number, got {value!r}", key=key, line=line)
        if not math.isfinite(float(value)):
            raise PlanError(src, f"must be finite, got {value!r}", key=key, line=line)
        return float(value)
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlanError(src, f"expected an integer, got {value!r}", key=key, line=line)
        return value
    if not isinstance(value, typ):
        raise PlanError(src, f"expected {typ.__name__}, got {type(value).__name__} {value!r}", key=key, line=line)
    return value


def parse_plan_text(text: str, *, source: str = "<plan>", default_name: str = "plan") -> Plan:
    """A plan from its TOML text; every error names the source, the line and the key (PlanError)."""
    data = _toml(text, source)
    top = _top(data, text, source)
    name = top.get("name", default_name)
    if not NAME_RE.match(name):
        raise PlanError(source, f"invalid plan name {name!r}", key="name", line=_line_of(text, "name"))
    workload = _workload(top.get("workload"), text, source)
    raw_levels = top.get("level")
    if not raw_levels:
        raise PlanError(source, "a plan needs at least one [[level]] table", key="level")
    levels: list[PlanLevel] = []
    seen_c: set[int] = set()
    for i, raw in enumerate(raw_levels):
        lv = _level(raw, i, top, text, source)
        if lv.concurrency in seen_c:
            raise PlanError(
                source,
                f"concurrency {lv.concurrency} appears twice",
                key=f"level[{i}].concurrency",
                line=_key_line_in_level(text, i, "concurrency"),
            )
        seen_c.add(lv.concurrency)
        levels.append(lv)
    return Plan(
        workload=workload,
        name=name,
        levels=tuple(levels),
        endpoint=top.get("endpoint", "completions"),
        ignore_eos=top["ignore_eos"],
        temperature=top.get("temperature", 0.0),
        seed=top.get("seed", 1),
        description=top.get("description", ""),
        source=source,
    )


def _toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line = getattr(e, "lineno", None)
        msg = getattr(e, "msg", None) or str(e)
        m = re.search(r"\s*\(at line (\d+), column (\d+)\)", msg)
        if m:
            line = line or int(m.group(1))
            msg = msg[: m.start()] + f" (column {m.group(2)})"
        elif re.search(r"\(at end of document\)", msg):
            line = line or text.count("\n") + 1
        raise PlanError(source, f"TOML syntax error: {msg}", line=line) from None


def _top(data: dict[str, Any], text: str, source: str) -> dict[str, Any]:
    """The plan's top-level keys, typed and in range."""
    for key in data:
        if key not in _TOP_KEYS:
            allowed = ", ".join(sorted(_TOP_KEYS))
            raise PlanError(source, f"unknown key (allowed: {allowed})", key=key, line=_line_of(text, key))
    top: dict[str, Any] = {}
    for key, typ in _TOP_KEYS.items():
        if key in data:
            top[key] = _check_type(data[key], typ, source, key, _line_of(text, key))
    for key in _REQUIRED_TOP:
        if key not in top:
            raise PlanError(source, "required key missing", key=key)
    endpoint = top.get("endpoint", "completions")
    if endpoint not in ENDPOINTS:
        raise PlanError(
            source,
            f"must be one of {', '.join(ENDPOINTS)}, got {endpoint!r}",
            key="endpoint",
            line=_line_of(text, "endpoint"),
        )
    for key, low in (("input_len", 1), ("output_len", 1), ("warmup", 0), ("seed", 0), ("temperature", 0)):
        if top.get(key, low) < low:
            raise PlanError(source, f"must be >= {low}", key=key, line=_line_of(text, key))
    return top


def _level(raw: Any, i: int, top: dict[str, Any], text: str, source: str) -> PlanLevel:
    """The ``i``-th ``[[level]]`` table, its missing values taken from the top of the plan."""
    where = f"level[{i}]"
    if not isinstance(raw, dict):
        raise PlanError(source, "each level must be a table ([[level]])", key=where)
    for key in raw:
        if key not in _LEVEL_KEYS:
            allowed = ", ".join(sorted(_LEVEL_KEYS))
            line = _key_line_in_level(text, i, key)
            raise PlanError(source, f"unknown key (allowed: {allowed})", key=f"{where}.{key}", line=line)
    vals: dict[str, Any] = {}
    for key, typ in _LEVEL_KEYS.items():
        if key in raw:
            vals[key] = _check_type(raw[key], typ, source, f"{where}.{key}", _key_line_in_level(text, i, key))
    for key in ("concurrency", "num_prompts"):
        if key not in vals:
            raise PlanError(source, "required key missing", key=f"{where}.{key}", line=_level_line(text, i))
        if vals[key] < 1:
            raise PlanError(source, "must be >= 1", key=f"{where}.{key}", line=_key_line_in_level(text, i, key))
    rate = vals.get("request_rate", top.get("request_rate"))
    if rate is not None and rate <= 0:
        raise PlanError(source, "must be > 0", key=f"{where}.request_rate")
    for key, low in (("input_len", 1), ("output_len", 1), ("warmup", 0)):
        if vals.get(key, low) < low:
            raise PlanError(source, f"must be >= {low}", key=f"{where}.{key}")
    return PlanLevel(
        concurrency=vals["concurrency"],
        num_prompts=vals["num_prompts"],
        input_len=vals.get("input_len", top["input_len"]),
        output_len=vals.get("output_len", top["output_len"]),
        warmup=vals.get("warmup", top.get("warmup", 1)),
        label=vals.get("label", ""),
        request_rate=rate,
    )


def _table_line(text: str, table: str, key: str) -> int | None:
    """Line of ``key =`` inside ``[table]`` (else of the table's header)."""
    m = re.search(rf"^[ \t]*\[[ \t]*{re.escape(table)}[ \t]*\]", text, re.MULTILINE)
    if m is None:
        return None
    start = text.count("\n", 0, m.start())
    lines = text.splitlines()
    for n in range(start + 1, len(lines)):
        s = lines[n].strip()
        if s.startswith("["):
            break
        if re.match(rf"{re.escape(key)}\s*=", s):
            return n + 1
    return start + 1


def _workload(raw: dict[str, Any] | None, text: str, source: str) -> WorkloadSpec:
    """The ``[workload]`` table: ``name``, a file source's ``path`` (relative to the plan's folder),
    the source's options by their plain names."""
    if raw is None:
        return WorkloadSpec()
    params = dict(raw)
    name = params.pop("name", None)
    if not isinstance(name, str) or name not in SOURCES:
        raise PlanError(
            source,
            f"expected one of {', '.join(SOURCES)}, got {name!r}",
            key="workload.name",
            line=_table_line(text, "workload", "name"),
        )
    path = params.pop("path", None)
    if path is not None and not isinstance(path, str):
        raise PlanError(source, "expected a file path", key="workload.path", line=_table_line(text, "workload", "path"))
    if (path is None) == (name in FILE_SOURCES):
        why = "needs a file: path = FILE" if path is None else "reads no file; drop path"
        raise PlanError(source, f"{name} {why}", key="workload", line=_table_line(text, "workload", "name"))
    if path is not None and not os.path.isabs(os.path.expanduser(path)):
        folder = Path(source).parent if Path(source).is_file() else Path.cwd()
        path = str(folder / path)
    for key in params:
        if key not in OPTIONS[name] and key != "context_limit":
            raise PlanError(
                source,
                f"not an option of {name} (its options: {', '.join(OPTIONS[name] + ('context_limit',))})",
                key=f"workload.{key}",
                line=_table_line(text, "workload", key),
            )
    return WorkloadSpec(name, None if path is None else os.path.expanduser(path), params)


__all__ = [
    "BUILTIN_PLANS",
    "Plan",
    "PlanError",
    "PlanLevel",
    "builtin_plans_dir",
    "find_plan",
    "list_plans",
    "load_plan",
    "parse_plan_file",
    "parse_plan_text",
    "user_plans_dir",
]
