"""A server profile from its TOML (:func:`load_profile_file`, :func:`load_profile_text`,
:func:`profile_from_dict`), checked section by section: every error is a
:class:`~tunedeck.profiles.tomlread.ProfileError` naming the file, the line and the key. The format
is described in :mod:`tunedeck.profiles.model`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from tunedeck.profiles.model import (
    DEPLOY_KEYS,
    DEPLOY_MODES,
    ENGINES,
    FLAG_NAME_RE,
    MAX_NODES,
    NAME_RE,
    NODE_RE,
    SCHEMA_VERSION,
    Deploy,
    ServerProfile,
    Speculative,
)
from tunedeck.profiles.tomlread import ProfileError, TomlReader, parse_toml
from tunedeck.util.safety import ENV_NAME_RE

_TOP_KEYS = {
    "schema_version",
    "name",
    "engine",
    "model",
    "tp",
    "host",
    "port",
    "python",
    "extra_args",
    "notes",
    "confirm_dangerous",
    "allow_unlisted_flags",
    "mla",
    "attention",
    "nccl",
    "flags",
    "env",
    "speculative",
    "nodes",
    "deploy",
}
#: an address a node can be reached at (host name, IPv4 or IPv6 literal)
_ADDRESS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$|^[0-9A-Fa-f:.]+$")


def profile_from_dict(
    data: Mapping[str, Any],
    *,
    name: str,
    text: str = "",
    path: str | Path | None = None,
    source: str = "",
) -> ServerProfile:
    """A profile from its TOML data, checked section by section; every error names the file, the
    line and the key (``ProfileError``)."""
    r = TomlReader(text, path)
    r.unknown(data, _TOP_KEYS, ())
    sv, engine, model = _header(r, data, name, path)
    kw: dict[str, Any] = {}
    _scalars(r, data, kw)
    if "attention" in data:
        kw.update(_attention(r, data["attention"], engine))
    if "nccl" in data:
        kw.update(_nccl(r, data["nccl"]))
    if "flags" in data:
        kw["flags"] = _flags(r, data["flags"])
    if "env" in data:
        kw["env"] = r.env_table(data["env"], ("env",))
    if "speculative" in data:
        kw["speculative"] = _speculative(r, data["speculative"])
    if "nodes" in data:
        kw["nodes"] = _nodes(r, data["nodes"])
    if "deploy" in data:
        if not kw.get("nodes"):
            raise r.err(("deploy",), '[deploy] needs nodes = ["host-a", "host-b", …] (two or more)')
        kw["deploy"] = _deploy(r, data["deploy"], engine, len(kw["nodes"]))
    return ServerProfile(
        name=name,
        engine=engine,
        model=model,
        source=source,
        path=str(path) if path else "",
        schema_version=sv,
        **kw,
    )


def _header(r: TomlReader, data: Mapping[str, Any], name: str, path: str | Path | None) -> tuple[int, str, str]:
    """``schema_version``, the name (it must match the file's), ``engine`` and ``model``."""
    sv = data.get("schema_version", SCHEMA_VERSION)
    if isinstance(sv, bool) or not isinstance(sv, int) or sv < 1:
        raise r.err(("schema_version",), "expected a positive integer")
    if sv > SCHEMA_VERSION:
        raise r.err(
            ("schema_version",),
            f"version {sv} is newer than this tunedeck understands ({SCHEMA_VERSION}); upgrade tunedeck",
        )
    if "name" in data:
        n = r.text_value(data["name"], ("name",))
        if n != name:
            raise r.err(("name",), f"name {n!r} does not match the file name {name!r}")
    if not NAME_RE.match(name):
        raise ProfileError(
            f"invalid profile name {name!r} (letters, digits, '.', '_', '-'; at most 64)",
            path=path,
            key="name",
        )
    if "engine" not in data:
        raise ProfileError("missing required key (sglang or vllm)", path=path, key="engine")
    engine = r.text_value(data["engine"], ("engine",))
    if engine not in ENGINES:
        raise r.err(("engine",), f"unknown engine {engine!r} (expected sglang or vllm)")
    if "model" not in data:
        raise ProfileError("missing required key (model path or id)", path=path, key="model")
    return sv, engine, r.text_value(data["model"], ("model",), allow_empty=False)


def _scalars(r: TomlReader, data: Mapping[str, Any], kw: dict[str, Any]) -> None:
    """The top-level numbers, texts and switches."""
    if "tp" in data:
        kw["tp"] = r.int_value(data["tp"], ("tp",), 1, 1024)
    if "port" in data:
        kw["port"] = r.int_value(data["port"], ("port",), 0, 65535)
    for k in ("host", "python", "extra_args", "notes"):
        if k in data:
            kw[k] = r.text_value(data[k], (k,))
    for k in ("allow_unlisted_flags", "mla"):
        if k in data:
            if not isinstance(data[k], bool):
                raise r.err((k,), "expected true or false")
            kw[k] = data[k]
    if "confirm_dangerous" in data:
        cd = data["confirm_dangerous"]
        if not isinstance(cd, list):
            raise r.err(("confirm_dangerous",), "expected a list of variable names")
        names = []
        for v in cd:
            v = r.text_value(v, ("confirm_dangerous",))
            if not ENV_NAME_RE.match(v):
                raise r.err(("confirm_dangerous",), f"invalid environment variable name {v!r}")
            names.append(v)
        kw["confirm_dangerous"] = tuple(names)


def _attention(r: TomlReader, value: Any, engine: str) -> dict[str, Any]:
    att = r.table(value, ("attention",))
    r.unknown(att, {"backend", "prefill", "decode"}, ("attention",))
    kw: dict[str, Any] = {}
    for src, dst in (("backend", "attention_backend"), ("prefill", "prefill_backend"), ("decode", "decode_backend")):
        if src in att:
            kw[dst] = r.text_value(att[src], ("attention", src))
    if engine == "vllm" and (kw.get("prefill_backend") or kw.get("decode_backend")):
        which = "prefill" if kw.get("prefill_backend") else "decode"
        raise r.err(("attention", which), "per-phase attention backends exist only on SGLang")
    return kw


def _nccl(r: TomlReader, value: Any) -> dict[str, Any]:
    nc = r.table(value, ("nccl",))
    r.unknown(nc, {"preset", "overrides"}, ("nccl",))
    kw: dict[str, Any] = {}
    if "preset" in nc:
        kw["nccl_preset"] = r.text_value(nc["preset"], ("nccl", "preset"), allow_empty=False)
    if "overrides" in nc:
        kw["nccl_overrides"] = r.env_table(nc["overrides"], ("nccl", "overrides"))
    return kw


def _flags(r: TomlReader, value: Any) -> tuple[tuple[str, Any], ...]:
    fl = r.table(value, ("flags",))
    flags = []
    for k, v in fl.items():
        fk = k[2:] if k.startswith("--") else k
        if not FLAG_NAME_RE.match(fk):
            raise r.err(("flags", k), f"invalid flag name {k!r} (lower-case words joined by '-')")
        if isinstance(v, str):
            r.text_value(v, ("flags", k))
        elif not isinstance(v, (bool, int, float)):
            raise r.err(("flags", k), f"expected true/false, a number or a string, got {type(v).__name__}")
        flags.append((fk, v))
    return tuple(flags)


def _speculative(r: TomlReader, value: Any) -> Speculative:
    sp = r.table(value, ("speculative",))
    r.unknown(sp, {"algorithm", "draft_model", "num_steps", "eagle_topk", "num_draft_tokens"}, ("speculative",))
    skw: dict[str, Any] = {}
    for k in ("algorithm", "draft_model"):
        if k in sp:
            skw[k] = r.text_value(sp[k], ("speculative", k))
    for k in ("num_steps", "eagle_topk", "num_draft_tokens"):
        if k in sp:
            skw[k] = r.int_value(sp[k], ("speculative", k), 1, 4096)
    return Speculative(**skw)


def _nodes(r: TomlReader, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise r.err(("nodes",), 'expected a list of hosts, e.g. ["gpu-a", "gpu-b"]')
    out: list[str] = []
    for i, v in enumerate(value, 1):
        v = r.text_value(v, ("nodes",), allow_empty=False)
        if not NODE_RE.match(v):
            raise r.err(("nodes",), f"entry {i}: {v!r} is not a host ([user@]host[:port] or an ssh alias)")
        if v in out:
            raise r.err(("nodes",), f"entry {i}: {v!r} is listed twice (also entry {out.index(v) + 1})")
        out.append(v)
    if len(out) < 2:
        raise r.err(("nodes",), "a multi-node profile needs two or more nodes (leave nodes out for one host)")
    if len(out) > MAX_NODES:
        raise r.err(("nodes",), f"{len(out)} nodes: at most {MAX_NODES}")
    return tuple(out)


def _deploy(r: TomlReader, value: Any, engine: str, n_nodes: int) -> Deploy:
    d = r.table(value, ("deploy",))
    r.unknown(d, DEPLOY_KEYS, ("deploy",))
    kw: dict[str, Any] = {}
    if "mode" in d:
        mode = r.text_value(d["mode"], ("deploy", "mode"))
        modes = DEPLOY_MODES.get(engine, ())
        if mode not in modes:
            raise r.err(("deploy", "mode"), f"{mode!r} is not a {engine} mode (one of: {', '.join(modes)})")
        kw["mode"] = mode
    if "head_address" in d:
        ha = r.text_value(d["head_address"], ("deploy", "head_address"))
        if ha and not _ADDRESS_RE.match(ha):
            raise r.err(("deploy", "head_address"), f"{ha!r} is not a host name or IP address")
        kw["head_address"] = ha
    _deploy_ints(r, d, kw, _DEPLOY_INTS)
    if "ray" in d:
        ray = r.text_value(d["ray"], ("deploy", "ray"), allow_empty=False)
        if ray.startswith("-") or ray.strip() != ray or "=" in ray:
            raise r.err(("deploy", "ray"), f"invalid executable {ray!r}")
        kw["ray"] = ray
    _deploy_ints(r, d, kw, _RAY_INTS)
    if "ray_dashboard" in d:
        if not isinstance(d["ray_dashboard"], bool):
            raise r.err(("deploy", "ray_dashboard"), f"expected true or false, got {type(d['ray_dashboard']).__name__}")
        kw["ray_dashboard"] = d["ray_dashboard"]
    if "ray_temp_dir" in d:
        kw["ray_temp_dir"] = _per_node(r, d["ray_temp_dir"], "ray_temp_dir", n_nodes, _temp_dir)
    if "node_addresses" in d:
        addrs = _per_node(r, d["node_addresses"], "node_addresses", n_nodes, _address, one_for_all=False)
        kw["node_addresses"] = addrs
    return Deploy(**kw)


#: the ``[deploy]`` whole numbers and their bounds, in the order they are checked (around ``ray``)
_DEPLOY_INTS = (("port", 1, 65535), ("gpus_per_node", 1, 64), ("pp", 1, 4096), ("dp", 1, 4096))
_RAY_INTS = (("ray_wait", 1, 86400), ("ray_num_cpus", 0, 65536))


def _deploy_ints(r: TomlReader, d: Mapping[str, Any], kw: dict[str, Any], keys: Sequence[tuple[str, int, int]]) -> None:
    """Each of ``keys`` that ``d`` has, into ``kw`` as a whole number within its bounds."""
    for k, lo, hi in keys:
        if k in d:
            kw[k] = r.int_value(d[k], ("deploy", k), lo, hi)


def _temp_dir(v: str) -> str | None:
    """Why ``v`` is not a usable ``--temp-dir`` (None: it is)."""
    if not v.startswith("/"):
        return f"{v!r} is not an absolute path"
    if ".." in v.split("/"):
        return f"{v!r} contains '..'"
    if any(c.isspace() for c in v):
        return f"{v!r} contains white space"
    # Ray puts Unix sockets under it (…/session_<date>_<pid>/sockets/plasma_store: ~60 characters
    # more) and a socket path is at most 107 bytes
    if len(v.encode()) > 40:
        return f"{v!r} is longer than 40 bytes (Ray's socket paths under it must fit in 107)"
    return None


def _address(v: str) -> str | None:
    return None if _ADDRESS_RE.match(v) else f"{v!r} is not a host name or IP address"


def _per_node(
    r: TomlReader, value: Any, key: str, n_nodes: int, why_bad: Any, *, one_for_all: bool = True
) -> tuple[str, ...]:
    """A value per node: a list as long as ``nodes`` (or one string for all nodes)."""
    kp = ("deploy", key)
    if isinstance(value, str) and one_for_all:
        values = [value]
    elif isinstance(value, list):
        if len(value) != n_nodes:
            raise r.err(kp, f"{len(value)} entries for {n_nodes} nodes (one per node, in the order of nodes)")
        values = value
    else:
        shape = "a string or a list, one per node" if one_for_all else "a list, one per node"
        raise r.err(kp, f"expected {shape}, got {type(value).__name__}")
    out: list[str] = []
    for i, v in enumerate(values, 1):
        v = r.text_value(v, kp, allow_empty=False)
        bad = why_bad(v)
        if bad:
            raise r.err(kp, f"entry {i}: {bad}" if len(values) > 1 else bad)
        out.append(v)
    return tuple(out)


def load_profile_text(text: str, *, name: str, path: str | Path | None = None, source: str = "") -> ServerProfile:
    return profile_from_dict(parse_toml(text, path), name=name, text=text, path=path, source=source)


def load_profile_file(path: str | Path, *, source: str = "user") -> ServerProfile:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ProfileError(f"cannot read: {e.strerror}", path=p) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ProfileError("not valid UTF-8", path=p, line=line) from None
    return load_profile_text(text, name=p.stem, path=p, source=source)


__all__ = ["load_profile_file", "load_profile_text", "profile_from_dict"]
