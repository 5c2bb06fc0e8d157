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

Every error is a :class:`ProfileError` naming the file, the line and the key: the reading is
:mod:`tunedeck.profiles.profileread`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any

from tunedeck.profiles.tomlread import ProfileError
from tunedeck.util.safety import DANGEROUS_ENV

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


#: the keys of ``[deploy]``: the fields of :class:`Deploy`
DEPLOY_KEYS = frozenset(f.name for f in fields(Deploy))


def guess_mla(model: str) -> bool:
    """DeepSeek V2/V3/R1 (and Kimi K2, which reuses the architecture) use MLA attention."""
    m = model.lower()
    if "deepseek" in m and not re.search(r"distill|coder-(1\.3|6\.7|33)b|deepseek-llm", m):
        return True
    return "kimi-k2" in m


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
            for k in sorted(DEPLOY_KEYS)
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
    "profile_jsonable",
    "profile_to_dict",
    "profile_to_toml",
]
