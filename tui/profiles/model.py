"""Server profiles and presets as frozen dataclasses, parsed from TOML with precise errors.

A server profile file (``NAME.toml``)::

    schema_version = 1
    engine = "sglang"                  # sglang | vllm
    model = "deepseek-ai/DeepSeek-V2-Lite-Chat"
    tp = 8                             # tensor parallel size
    host = "127.0.0.1"               # loopback; "0.0.0.0" exposes the API (pre-flight warns)
    port = 30000
    python = "python3"                 # interpreter that runs the engine
    extra_args = "--page-size=64"      # free text, shlex-split, checked token by token
    confirm_dangerous = []             # env names like LD_PRELOAD the user confirmed
    notes = "..."

    [attention]
    backend = "flashinfer"             # "" = the engine's choice
    prefill = ""                       # SGLang only: --prefill-attention-backend
    decode = ""                        # SGLang only: --decode-attention-backend

    [nccl]
    preset = "pcie"                    # default | pcie | nvlink | debug | a user preset
    [nccl.overrides]
    NCCL_BUFFSIZE = "8388608"          # "" removes a preset variable

    [flags]                            # flag (without --) -> value; true = bare boolean flag
    num-continuous-decode-steps = 4
    disable-custom-all-reduce = true

    [env]
    SGLANG_ENABLE_JIT_DEEPGEMM = "0"

    [speculative]                      # optional
    algorithm = "EAGLE3"
    draft_model = "..."
    num_steps = 3
    eagle_topk = 1
    num_draft_tokens = 4

A multi-node profile names its hosts (any TARGET form; the first is the head)::

    nodes = ["gpu-a", "gpuop@gpu-b:2222"]

    [deploy]                           # optional, only with nodes
    mode = "ray"                       # SGLang: "tp"; vLLM: "ray" (default) or "dp"
    head_address = "10.0.0.1"          # what the workers dial (default: the head's host name)
    port = 6379                        # the rendezvous port (SGLang 5000, Ray 6379, vLLM DP 13345)
    gpus_per_node = 8
    pp = 2                             # vLLM on Ray: --pipeline-parallel-size
    dp = 16                            # vLLM data parallel: --data-parallel-size
    ray = "ray"                        # the ray executable on the nodes
    ray_wait = 180                     # seconds to wait for `ray status` to show the GPUs
    ray_num_cpus = 2                   # Ray: --num-cpus on every node (default: Ray's, all cores)
    ray_dashboard = false              # Ray: --include-dashboard=false on the head
    ray_temp_dir = "/tmp/ray-td"       # Ray: --temp-dir, one for all nodes or a list, one per node
    node_addresses = ["10.0.0.1", "10.0.0.2"]   # Ray: --node-ip-address, one per node

Every error is a :class:`ProfileError` naming the file, the line and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from tui.profiles.tomlread import ProfileError, TomlReader, parse_toml
from tui.util.safety import DANGEROUS_ENV, ENV_NAME_RE

SCHEMA_VERSION = 1
ENGINES = ("sglang", "vllm")
DEFAULT_PORTS = {"sglang": 30000, "vllm": 8000}
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FLAG_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


# ---------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True, slots=True)
class Speculative:
    """Speculative decoding. SGLang: --speculative-*; vLLM: one --speculative-config JSON."""

    algorithm: str = ""
    draft_model: str = ""
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None


#: deployment modes per engine; the first is the default
DEPLOY_MODES = {"sglang": ("tp",), "vllm": ("ray", "dp")}
#: the default rendezvous port per mode: SGLang --dist-init-addr, Ray's GCS, vLLM's DP RPC port
DEFAULT_RENDEZVOUS_PORTS = {"tp": 5000, "ray": 6379, "dp": 13345}
MAX_NODES = 64
#: a TARGET as a profile may name it: ``local``, ``[user@]host[:port]``, ``[user@][v6]:port`` or an alias
NODE_RE = re.compile(r"^(?:[a-z_][a-z0-9_-]*@)?(?:[A-Za-z0-9][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$")


@dataclass(frozen=True, slots=True)
class Deploy:
    """How a multi-node profile spreads over its nodes (``[deploy]``)."""

    mode: str = ""  # "" = the engine's default (sglang: tp, vllm: ray)
    head_address: str = ""  # "" = the head node's host name
    port: int = 0  # 0 = the mode's default rendezvous port
    gpus_per_node: int = 8
    pp: int = 0  # vLLM on Ray: 0 = the node count
    dp: int = 0  # vLLM data parallel: 0 = nodes × gpus_per_node / tp
    ray: str = "ray"
    ray_wait: int = 180
    ray_num_cpus: int = -1  # -1 = Ray's default (every core)
    ray_dashboard: bool = True  # False = --include-dashboard=false (True leaves Ray's default)
    ray_temp_dir: tuple[str, ...] = ()  # one path for every node, or one per node
    node_addresses: tuple[str, ...] = ()  # one per node: Ray's --node-ip-address


@dataclass(frozen=True, slots=True)
class ServerProfile:
    name: str
    engine: str
    model: str
    tp: int = 8
    host: str = "127.0.0.1"  # binding wider is an explicit choice (pre-flight warns)
    port: int = 0  # 0 = the engine's default port
    python: str = "python3"
    attention_backend: str = ""
    prefill_backend: str = ""
    decode_backend: str = ""
    nccl_preset: str = "default"
    nccl_overrides: tuple[tuple[str, str], ...] = ()
    flags: tuple[tuple[str, bool | int | float | str], ...] = ()
    extra_args: str = ""
    env: tuple[tuple[str, str], ...] = ()
    notes: str = ""
    speculative: Speculative | None = None
    confirm_dangerous: tuple[str, ...] = ()
    allow_unlisted_flags: bool = False
    mla: bool | None = None  # None: guessed from the model name
    #: the hosts of a multi-node deployment (the first is the head); () = one host, the --host one
    nodes: tuple[str, ...] = ()
    deploy: Deploy = Deploy()
    #: where it came from: "builtin", "user" or "" (not saved yet)
    source: str = ""
    path: str = ""
    schema_version: int = SCHEMA_VERSION

    @property
    def effective_port(self) -> int:
        return self.port or DEFAULT_PORTS.get(self.engine, 30000)

    @property
    def multi_node(self) -> bool:
        return len(self.nodes) > 1

    @property
    def deploy_mode(self) -> str:
        return self.deploy.mode or DEPLOY_MODES.get(self.engine, ("tp",))[0]

    @property
    def read_only(self) -> bool:
        return self.source == "builtin"

    @property
    def is_mla(self) -> bool:
        if self.mla is not None:
            return self.mla
        return guess_mla(self.model)

    def with_(self, **changes: Any) -> "ServerProfile":
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class NcclPreset:
    name: str
    description: str = ""
    vars: tuple[tuple[str, str], ...] = ()
    warning: str = ""
    source: str = ""


@dataclass(frozen=True, slots=True)
class AttentionPreset:
    name: str
    engine: str
    backend: str = ""
    prefill: str = ""
    decode: str = ""
    description: str = ""
    source: str = ""


def guess_mla(model: str) -> bool:
    """DeepSeek V2/V3/R1 (and Kimi K2, which reuses the architecture) use MLA attention."""
    m = model.lower()
    if "deepseek" in m and not re.search(r"distill|coder-(1\.3|6\.7|33)b|deepseek-llm", m):
        return True
    return "kimi-k2" in m


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
_DEPLOY_KEYS = {
    "mode",
    "head_address",
    "port",
    "gpus_per_node",
    "pp",
    "dp",
    "ray",
    "ray_wait",
    "ray_num_cpus",
    "ray_dashboard",
    "ray_temp_dir",
    "node_addresses",
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
    r.unknown(d, _DEPLOY_KEYS, ("deploy",))
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
    if "port" in d:
        kw["port"] = r.int_value(d["port"], ("deploy", "port"), 1, 65535)
    if "gpus_per_node" in d:
        kw["gpus_per_node"] = r.int_value(d["gpus_per_node"], ("deploy", "gpus_per_node"), 1, 64)
    for k in ("pp", "dp"):
        if k in d:
            kw[k] = r.int_value(d[k], ("deploy", k), 1, 4096)
    if "ray" in d:
        ray = r.text_value(d["ray"], ("deploy", "ray"), allow_empty=False)
        if ray.startswith("-") or ray.strip() != ray or "=" in ray:
            raise r.err(("deploy", "ray"), f"invalid executable {ray!r}")
        kw["ray"] = ray
    if "ray_wait" in d:
        kw["ray_wait"] = r.int_value(d["ray_wait"], ("deploy", "ray_wait"), 1, 86400)
    if "ray_num_cpus" in d:
        kw["ray_num_cpus"] = r.int_value(d["ray_num_cpus"], ("deploy", "ray_num_cpus"), 0, 65536)
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


def profile_to_dict(p: ServerProfile) -> dict[str, Any]:
    """The TOML document for ``p`` (defaults left out, ``name`` kept for readability)."""
    d: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "name": p.name,
        "engine": p.engine,
        "model": p.model,
        "tp": p.tp,
    }
    if p.host:
        d["host"] = p.host
    if p.port:
        d["port"] = p.port
    if p.python != "python3":
        d["python"] = p.python
    if p.extra_args:
        d["extra_args"] = p.extra_args
    if p.notes:
        d["notes"] = p.notes
    if p.confirm_dangerous:
        d["confirm_dangerous"] = list(p.confirm_dangerous)
    if p.allow_unlisted_flags:
        d["allow_unlisted_flags"] = True
    if p.mla is not None:
        d["mla"] = p.mla
    att = {
        k: v
        for k, v in (("backend", p.attention_backend), ("prefill", p.prefill_backend), ("decode", p.decode_backend))
        if v
    }
    if att:
        d["attention"] = att
    nccl: dict[str, Any] = {"preset": p.nccl_preset}
    if p.nccl_overrides:
        nccl["overrides"] = dict(p.nccl_overrides)
    d["nccl"] = nccl
    if p.flags:
        d["flags"] = dict(p.flags)
    if p.env:
        d["env"] = dict(p.env)
    if p.nodes:
        d["nodes"] = list(p.nodes)
        dep = {
            k: (v[0] if len(v) == 1 else list(v)) if isinstance(v, tuple) else v
            for k in sorted(_DEPLOY_KEYS)
            if (v := getattr(p.deploy, k)) != getattr(Deploy(), k)
        }
        if dep:
            d["deploy"] = dep
    if p.speculative is not None:
        s = p.speculative
        sd: dict[str, Any] = {}
        if s.algorithm:
            sd["algorithm"] = s.algorithm
        if s.draft_model:
            sd["draft_model"] = s.draft_model
        for k in ("num_steps", "eagle_topk", "num_draft_tokens"):
            v = getattr(s, k)
            if v is not None:
                sd[k] = v
        d["speculative"] = sd
    return d


def profile_to_toml(p: ServerProfile) -> str:
    import tomli_w

    return tomli_w.dumps(profile_to_dict(p))


def profile_jsonable(p: ServerProfile) -> dict[str, Any]:
    d = profile_to_dict(p)
    d["source"] = p.source
    d["path"] = p.path
    d["read_only"] = p.read_only
    return d


def dangerous_names(p: ServerProfile) -> list[str]:
    names = {k for k, _ in p.env} | {k for k, _ in p.nccl_overrides}
    return sorted(n for n in names if n in DANGEROUS_ENV)


__all__ = [
    "DEPLOY_MODES",
    "ENGINES",
    "SCHEMA_VERSION",
    "AttentionPreset",
    "Deploy",
    "NcclPreset",
    "ProfileError",
    "ServerProfile",
    "Speculative",
    "dangerous_names",
    "guess_mla",
    "load_profile_file",
    "load_profile_text",
    "profile_from_dict",
    "profile_jsonable",
    "profile_to_dict",
    "profile_to_toml",
]
