"""A tuning campaign's candidates: a base profile with some of its TOML keys changed.

``--vary KEY=V1,V2`` names a key by its path in the profile's TOML (``flags.attention-backend``,
``flags.max-running-requests``, ``nccl.preset``, ``attention.backend``, ``tp``, ``env.NAME``,
``nccl.overrides.NCCL_PROTO``, ``speculative.num_steps``, …) and the values to try; several
``--vary`` give their Cartesian product. Over a multi-node base, the deployment's shape varies too:
``deploy.mode``, ``deploy.pp`` (vLLM on Ray) and ``deploy.dp`` (vLLM data parallel); a ``pp`` or
``dp`` change is no change to a candidate whose mode does not use it, and a shape the nodes cannot
hold is the deployment planner's to refuse (the campaign skips that candidate with its reason). A candidates file lists them instead::

    [[candidate]]
    name = "fi-32"                      # optional: derived from the changes when left out
    changes = { "flags.attention-backend" = "flashinfer", "flags.max-running-requests" = 32 }

Each candidate is the base's TOML document with its changes applied, read back by the profile
loader (so a bad value names its key like a bad profile does). Its name is derived readably from
the changes (``base+attention-backend=triton,max-running-requests=32``); the base itself is always
a candidate, and a combination that changes nothing is the base. A flag is checked against the
engine's release flag data (unknown, ambiguous or not one of its choices: :class:`VaryError`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import tomllib

from tunedeck.engines import release_flags
from tunedeck.profiles.deploy import parallel_sizes
from tunedeck.profiles.flagcheck import judge
from tunedeck.profiles.model import ProfileError, ServerProfile, profile_to_dict
from tunedeck.profiles.profileread import profile_from_dict


class VaryError(ValueError):
    """Bad ``--vary`` or candidates file: one line naming the item (or the file and key)."""


@dataclass(frozen=True)
class Candidate:
    """One configuration of a campaign: ``changes`` (TOML path -> value) over the base."""

    name: str
    changes: tuple[tuple[str, Any], ...]
    profile: ServerProfile

    @property
    def is_base(self) -> bool:
        return not self.changes


#: how many candidates a campaign may have (each is a model load)
MAX_CANDIDATES = 64

#: the ``[deploy]`` keys a campaign may vary (a multi-node base's shape), each with the
#: deployment mode that uses it (None: every mode)
DEPLOY_KEYS: dict[str, str | None] = {"deploy.mode": None, "deploy.pp": "ray", "deploy.dp": "dp"}


def _typed(path: tuple[str, ...], text: str) -> Any:
    """A ``--vary`` value as TOML would type it: true/false, an integer, a number, else text
    (environment values are always text)."""
    if path[0] == "env" or path[:2] == ("nccl", "overrides"):
        return text
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _path(key: str, where: str) -> tuple[str, ...]:
    path = tuple(key.split("."))
    if not key or any(not p for p in path):
        raise VaryError(f"{where}: {key!r} is not a TOML path (e.g. flags.attention-backend, nccl.preset, tp)")
    if path[0] == "deploy" and key not in DEPLOY_KEYS:
        raise VaryError(
            f"{where}: {key} cannot vary in a campaign (of [deploy], only {', '.join(DEPLOY_KEYS)} do: "
            "each candidate runs on the base's nodes)"
        )
    if path[0] in ("name", "engine", "model", "schema_version", "nodes"):
        raise VaryError(f"{where}: {key} cannot vary in a campaign (each candidate is the base with flags changed)")
    return path


def parse_vary(items: Sequence[str]) -> list[tuple[str, list[Any]]]:
    """``KEY=V1,V2`` items as (key, values); :class:`VaryError` naming the bad item."""
    out: list[tuple[str, list[Any]]] = []
    seen: set[str] = set()
    for item in items:
        key, eq, rest = item.partition("=")
        where = f"--vary {item!r}"
        if not eq:
            raise VaryError(f"{where}: expected KEY=V1,V2 (e.g. flags.attention-backend=fa3,triton)")
        key = key.strip()
        path = _path(key, where)
        values = [v.strip() for v in rest.split(",")]
        if not any(values) or any(not v for v in values):
            raise VaryError(f"{where}: an empty value (expected KEY=V1,V2)")
        if key in seen:
            raise VaryError(f"{where}: {key} is varied twice (give one --vary per key)")
        seen.add(key)
        typed = [_typed(path, v) for v in values]
        if len(set(map(repr, typed))) != len(typed):
            raise VaryError(f"{where}: a value is listed twice")
        out.append((key, typed))
    return out


def read_candidates_file(path: str) -> list[tuple[str | None, dict[str, Any]]]:
    """(name or None, changes) per ``[[candidate]]`` of a TOML file; :class:`VaryError` naming the
    file and the entry."""
    p = Path(path).expanduser()
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise VaryError(f"--candidates {path}: cannot read: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise VaryError(f"--candidates {path}: not TOML: {e}") from None
    unknown = set(data) - {"candidate"}
    if unknown:
        raise VaryError(f"--candidates {path}: unknown key {sorted(unknown)[0]!r} (expected [[candidate]] tables)")
    entries = data.get("candidate") or []
    if not isinstance(entries, list) or not entries:
        raise VaryError(f"--candidates {path}: no [[candidate]] table: the candidate set is empty")
    out: list[tuple[str | None, dict[str, Any]]] = []
    for i, ent in enumerate(entries, 1):
        where = f"--candidates {path}: candidate {i}"
        if not isinstance(ent, dict) or set(ent) - {"name", "changes"}:
            raise VaryError(f'{where}: expected name = "…" and changes = {{ "KEY" = VALUE, … }}')
        name = ent.get("name")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise VaryError(f"{where}: name must be a non-empty string")
        changes = ent.get("changes") or {}
        if not isinstance(changes, dict):
            raise VaryError(f"{where}: changes must be a table of TOML paths")
        for key in changes:
            _path(key, where)
        out.append((name, dict(changes)))
    return out


def _flat(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in doc.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def changes_between(base: ServerProfile, other: ServerProfile) -> dict[str, Any]:
    """``other`` as changes over ``base`` (TOML path -> value), for a candidates file made from
    profiles marked in the dashboard; :class:`VaryError` naming the key a change cannot express
    (one the base sets and ``other`` leaves out)."""
    a = _flat({k: v for k, v in profile_to_dict(base).items() if k not in ("name", "notes")})
    b = _flat({k: v for k, v in profile_to_dict(other).items() if k not in ("name", "notes")})
    gone = sorted(k for k in a if k not in b)
    if gone:
        raise VaryError(
            f"{other.name}: leaves out {gone[0]}, which the base {base.name} sets (a change cannot unset it)"
        )
    return {k: v for k, v in b.items() if a.get(k) != v}


def candidates_toml(items: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """A candidates file (:func:`read_candidates_file` reads it back) of (name, changes)."""
    import tomli_w

    return tomli_w.dumps({"candidate": [{"name": n, "changes": dict(ch)} for n, ch in items]})


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = doc
    for part in path[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[path[-1]] = value


def profile_key(engine: str, key: str) -> str:
    """The TOML path a change is made at: a flag the profile sets from a field of its own
    (``flags.attention-backend`` is ``attention.backend``, ``flags.tp-size`` is ``tp``) at that field."""
    from tunedeck.profiles.schema import FLAGS

    path = key.split(".")
    if path[0] == "flags" and len(path) == 2:
        spec = FLAGS[engine].get(path[1])
        if spec is not None and spec.managed and spec.managed not in ("model", "speculative"):
            return spec.managed
    return key


def check_flag(engine: str, key: str, value: Any, where: str) -> None:
    """A ``flags.NAME`` change judged against the engine's release flag data (what the profile
    builder judges a flag by): unknown, ambiguous, a prefix or not one of its choices is an error."""
    path = key.split(".")
    if path[0] != "flags" or len(path) != 2:
        return
    given = None if isinstance(value, bool) else str(value)
    v = judge(release_flags(engine), f"--{path[1]}", given)
    if v.kind != "ok":
        raise VaryError(f"{where}: {v.message}")


def label(key: str, value: Any) -> str:
    """``attention-backend=triton`` for ``flags.attention-backend`` (other keys keep their path)."""
    short = key[len("flags.") :] if key.startswith("flags.") else key
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return f"{short}={text}"


def candidate_name(base: str, changes: Sequence[tuple[str, Any]]) -> str:
    return base if not changes else f"{base}+" + ",".join(label(k, v) for k, v in changes)


def apply(base: ServerProfile, changes: Sequence[tuple[str, Any]], where: str) -> ServerProfile:
    """The base with ``changes`` applied, read back by the profile loader (its checks, its errors)."""
    doc = profile_to_dict(base)
    for key, value in changes:
        _set(doc, tuple(key.split(".")), value)
    try:
        return profile_from_dict(doc, name=base.name, source=base.source, path=base.path)
    except ProfileError as e:
        key = f"{e.key}: " if e.key else ""
        raise VaryError(f"{where}: {key}{e.message}") from None


def _current(base_doc: Mapping[str, Any], key: str) -> Any:
    node: Any = base_doc
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _ident(prof: ServerProfile) -> str:
    """What makes two candidates one: the profile, its deployment's shape as the planner takes it
    (``mode = "ray"`` on vLLM, whose default it is, is no change; nor is ``pp`` = the node count)."""
    if len(prof.nodes) >= 2:
        pp, dp = parallel_sizes(prof)
        prof = replace(prof, deploy=replace(prof.deploy, mode=prof.deploy_mode, pp=pp, dp=dp))
    return repr(sorted(profile_to_dict(prof).items(), key=lambda kv: kv[0]))


def _mode_unused(base: ServerProfile, changes: Sequence[tuple[str, Any]]) -> list[str]:
    """The ``[deploy]`` keys among ``changes`` that the candidate's deployment mode does not use
    (``deploy.pp`` outside vLLM on Ray, ``deploy.dp`` outside vLLM data parallel)."""
    mode = next((v for k, v in changes if k == "deploy.mode"), base.deploy_mode)
    return [k for k, _ in changes if DEPLOY_KEYS.get(k) not in (None, mode)]


def _deploy_changes(base: ServerProfile, changes: Sequence[tuple[str, Any]], where: str) -> None:
    """:class:`VaryError` for a ``[deploy]`` change over a base that runs on one host."""
    key = next((k for k, _ in changes if k in DEPLOY_KEYS), None)
    if key is not None and len(base.nodes) < 2:
        raise VaryError(
            f"{where}: {key} varies only over a multi-node base (nodes = [...]); {base.name} runs on one host"
        )


def expand(
    base: ServerProfile,
    vary: Sequence[tuple[str, Sequence[Any]]] = (),
    listed: Sequence[tuple[str | None, Mapping[str, Any]]] = (),
) -> list[Candidate]:
    """The campaign's candidates, the base first: the Cartesian product of ``vary`` (or the
    ``listed`` ones of a candidates file). A change to the base's own value is no change; two
    candidates with the same configuration are one; a ``[deploy]`` size the candidate's mode does
    not use is no change in a ``vary`` product (and a :class:`VaryError` when no candidate's mode
    uses it, or in a listed candidate). :class:`VaryError` for a bad key or value and for a set
    with nothing but the base."""
    base_doc = profile_to_dict(base)
    combos: list[tuple[str | None, list[tuple[str, Any]], str]] = []
    used: set[str] = set()
    if vary:
        keys = [k for k, _ in vary]
        for values in itertools.product(*(vs for _, vs in vary)):
            combos.append(
                (None, list(zip(keys, values)), "--vary " + ",".join(label(k, v) for k, v in zip(keys, values)))
            )
    for i, (name, changes) in enumerate(listed, 1):
        combos.append((name, list(changes.items()), f"--candidates: candidate {name or i}"))
    out = [Candidate(base.name, (), base)]
    seen = {_ident(base)}
    for name, change_list, where in combos:
        _deploy_changes(base, change_list, where)
        for key, value in change_list:
            check_flag(base.engine, key, value, where)
        unused = _mode_unused(base, change_list)
        if unused and not where.startswith("--vary"):  # a listed candidate says what it wants
            raise VaryError(f"{where}: {unused[0]} is not used by the candidate's deployment mode ({_uses(unused[0])})")
        change_list = [(k, v) for k, v in change_list if k not in unused]
        used.update(k for k, _ in change_list)
        named = [(k, v) for k, v in change_list if _current(base_doc, profile_key(base.engine, k)) != v]
        real = [(profile_key(base.engine, k), v) for k, v in named]
        prof = apply(base, real, where)
        ident = _ident(prof)
        if ident in seen:
            continue
        seen.add(ident)
        cname = name or candidate_name(base.name, named)
        if any(c.name == cname for c in out):
            raise VaryError(f"{where}: the name {cname!r} is used twice")
        out.append(Candidate(cname, tuple(real), replace(prof, name=cname)))
    never = [k for k, _ in vary if k in DEPLOY_KEYS and k not in used]
    if never:
        raise VaryError(
            f"--vary {never[0]}: no candidate's deployment mode uses it ({_uses(never[0])}; the base's is "
            f"{base.deploy_mode!r})"
        )
    if len(out) < 2:
        raise VaryError("the candidate set is empty: every combination is the base itself (nothing to compare)")
    if len(out) > MAX_CANDIDATES:
        raise VaryError(f"{len(out)} candidates: at most {MAX_CANDIDATES} (each is a model load; vary fewer keys)")
    return out


def _uses(key: str) -> str:
    return f"only mode = {DEPLOY_KEYS[key]!r} does"


__all__ = [
    "DEPLOY_KEYS",
    "MAX_CANDIDATES",
    "Candidate",
    "VaryError",
    "apply",
    "candidate_name",
    "candidates_toml",
    "changes_between",
    "check_flag",
    "expand",
    "label",
    "parse_vary",
    "profile_key",
    "read_candidates_file",
]
