"""What a pre-flight reads on the host (:func:`probe_host`, :class:`HostFacts`): the engine's
version, its ``--help`` as a flag table, its attention backends (from the help, or vLLM's
registry), the GPUs and their compute capability; the commands it runs for each
(:func:`probe_commands`), and the cache of help-derived facts per (host, engine executable,
version) in ``state_dir()/preflight-cache.json``. :mod:`tunedeck.profiles.preflight` turns them into
findings."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shlex
from dataclasses import dataclass
from typing import Any, Sequence

from tunedeck.engine_flags import Flag, FlagTable, parse_help
from tunedeck.profiles.builder import demo_executable, engine_executable
from tunedeck.profiles.model import ServerProfile
from tunedeck.profiles.schema import BUILTIN_BACKENDS
from tunedeck.util.files import atomic_write_json
from tunedeck.util.paths import state_dir

log = logging.getLogger(__name__)

VLLM_REGISTRY_ONELINER = (
    "from vllm.v1.attention.backends.registry import AttentionBackendEnum as E; print(' '.join(m.name for m in E))"
)
GPU_QUERY = ["nvidia-smi", "--query-gpu=index,name,compute_cap", "--format=csv,noheader"]
HELP_TIMEOUT = 180.0
CACHE_FILE = "preflight-cache.json"

_VERSION_RE = re.compile(r"\b(\d+\.\d+(?:\.\d+)?(?:[.+-]?[A-Za-z0-9]+)*)\b")


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    name: str
    compute_cap: str  # "9.0"; "" when not reported

    @property
    def major(self) -> int | None:
        try:
            return int(self.compute_cap.split(".")[0])
        except (ValueError, IndexError):
            return None


@dataclass(frozen=True, slots=True)
class HostFacts:
    target: str
    engine: str
    executable: tuple[str, ...]
    version: str | None = None
    backends: tuple[str, ...] | None = None
    #: "help" | "registry" (read from the host) | "builtin" (tunedeck's list: unverified)
    backends_source: str = "builtin"
    spec_algorithms: tuple[str, ...] | None = None
    #: the host engine's flags, from its --help; None when the help could not be read
    flags: FlagTable | None = None
    gpus: tuple[GpuInfo, ...] | None = None
    problems: tuple[str, ...] = ()
    cached: bool = False

    def jsonable(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "engine": self.engine,
            "executable": list(self.executable),
            "version": self.version,
            "backends": list(self.backends) if self.backends is not None else None,
            "backends_source": self.backends_source,
            "flags": len(self.flags.names) if self.flags is not None else None,
            "flags_source": "help" if self.flags is not None else "builtin",
            "gpus": [{"index": g.index, "name": g.name, "compute_cap": g.compute_cap} for g in self.gpus]
            if self.gpus is not None
            else None,
            "problems": list(self.problems),
            "cached": self.cached,
        }


# ------------------------------------------------------------------------------ parsing


def host_flags(text: str, engine: str, version: str | None, target: str) -> FlagTable | None:
    """The host engine's flag table from its ``--help`` output; None when it lists no options."""
    flags = parse_help(text)
    return _host_table(flags, engine, version, target) if len(flags) >= 3 else None


def _host_table(flags: tuple[Flag, ...], engine: str, version: str | None, target: str) -> FlagTable:
    ver = f" {version}" if version else ""
    return FlagTable(engine, version or "", flags, origin=f"the --help of {engine}{ver} on {target}")


def parse_version(text: str) -> str | None:
    for line in reversed([ln.strip() for ln in text.splitlines() if ln.strip()]):
        m = _VERSION_RE.search(line)
        if m:
            return m.group(1)
    return None


def parse_gpus(text: str) -> tuple[GpuInfo, ...]:
    out = []
    for i, line in enumerate(ln for ln in text.splitlines() if ln.strip()):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        try:
            idx = int(parts[0])
        except ValueError:
            idx = i
        cap = parts[-1]
        if not re.match(r"^\d+\.\d+$", cap):
            cap = ""
        out.append(GpuInfo(idx, ",".join(parts[1:-1]).strip(), cap))
    return tuple(out)


# ------------------------------------------------------------------------------ probing


def probe_commands(
    profile: ServerProfile, *, demo: bool, executable: Sequence[str] | None = None
) -> dict[str, list[str]]:
    """What to run on the host. ``executable``: the simulator as it runs there (``--sim``: the
    host-side runtime's ``sim ENGINE``), asked the same questions as the demo's."""
    sim = demo or executable is not None
    if executable is not None:
        prefix = list(executable)
    else:
        prefix = demo_executable(profile.engine) if demo else engine_executable(profile)
    if sim:
        version = [*prefix, "--version"]
    elif profile.engine == "sglang":
        version = [profile.python, "-c", "import sglang; print(sglang.__version__)"]
    elif profile.python == "python3":
        version = ["vllm", "--version"]
    else:
        version = [profile.python, "-c", "import vllm; print(vllm.__version__)"]
    cmds = {"version": version, "help": [*prefix, "--help"], "gpus": list(GPU_QUERY)}
    if profile.engine == "vllm":
        cmds["help_all"] = [*prefix, "--help=all"]
        # The demo's engine is the simulator (no vllm package to import): it answers the
        # registry probe itself, in the same one-line format.
        cmds["registry"] = [*prefix, "--sim-list-backends"] if sim else [profile.python, "-c", VLLM_REGISTRY_ONELINER]
    return cmds


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def _cache_key(target: str, engine: str, exe: Sequence[str], version: str) -> str:
    return json.dumps([target, engine, list(exe), version])


def _load_cache() -> dict[str, Any]:
    try:
        data = json.loads((state_dir() / CACHE_FILE).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _store_cache(key: str, entry: dict[str, Any]) -> None:
    data = _load_cache()
    data[key] = entry
    try:
        atomic_write_json(state_dir() / CACHE_FILE, data)
    except OSError as e:
        log.warning("the pre-flight cache was not written: %s", e)


async def probe_host(
    host: Any,
    profile: ServerProfile,
    *,
    demo: bool = False,
    use_cache: bool = True,
    executable: Sequence[str] | None = None,
) -> HostFacts:
    """Read version, help, backend list and GPUs from ``host`` (a tunedeck.hostops.hosts.Host);
    ``executable``: the simulator as it runs there (see :func:`probe_commands`)."""
    cmds = probe_commands(profile, demo=demo, executable=executable)
    # the host's nvidia-smi: a --sim host without one of its own has the simulated one
    cmds["gpus"] = [getattr(host, "nvidia_smi", None) or GPU_QUERY[0], *GPU_QUERY[1:]]
    exe = tuple(cmds["help"][:-1])
    target = getattr(host, "target", "?")
    problems: list[str] = []

    async def run(argv: list[str], timeout: float = HELP_TIMEOUT) -> Any:
        # A HostError (unreachable, auth, host key, lost link) propagates: the caller shows it
        # as the host's state; a command that fails on the host becomes a finding instead.
        return await host.run(argv, timeout=timeout)

    vres, gres = await asyncio.gather(run(cmds["version"]), run(cmds["gpus"], 30.0))
    version = parse_version(vres.stdout) if vres.ok else None
    if version is None:
        why = _first_line(vres.stderr) or f"exit status {vres.exit_status}"
        problems.append(f"engine version: `{shlex.join(cmds['version'])}` failed: {why}")
    gpus: tuple[GpuInfo, ...] | None = None
    if gres.ok:
        gpus = parse_gpus(gres.stdout)
        if not gpus:
            problems.append("GPUs: nvidia-smi listed no GPUs")
            gpus = None
    else:
        problems.append(f"GPUs: nvidia-smi failed: {_first_line(gres.stderr or gres.stdout) or gres.exit_status}")

    key = _cache_key(target, profile.engine, exe, version) if version else None
    if use_cache and key:
        hit = _load_cache().get(key)
        # An entry whose backend list could not be read from the host ("builtin") is asked again.
        cached_flags = _cached_flags(hit.get("flags")) if isinstance(hit, dict) else None
        if isinstance(hit, dict) and cached_flags is not None and hit.get("backends_source", "builtin") != "builtin":
            return HostFacts(
                target=target,
                engine=profile.engine,
                executable=exe,
                version=version,
                backends=tuple(hit["backends"]) if hit.get("backends") else BUILTIN_BACKENDS[profile.engine],
                backends_source=hit.get("backends_source", "builtin"),
                spec_algorithms=tuple(hit["spec"]) if hit.get("spec") else None,
                flags=_host_table(cached_flags, profile.engine, version, target),
                gpus=gpus,
                problems=tuple(problems),
                cached=True,
            )

    # vLLM >= 0.9 prints only a summary for --help and everything for --help=all: read both.
    help_text = ""
    if profile.engine == "vllm":
        hres = await run(cmds["help_all"])
        if hres.ok:
            help_text = hres.stdout
    hres = await run(cmds["help"])
    if hres.ok:
        help_text = f"{help_text}\n{hres.stdout}" if help_text else hres.stdout
    elif not help_text:
        problems.append(
            f"engine help: `{shlex.join(cmds['help'])}` failed: {_first_line(hres.stderr) or hres.exit_status}"
        )
    flags = host_flags(help_text, profile.engine, version, target) if help_text else None
    if help_text and flags is None:
        problems.append("engine help: no options found in the --help output")
    backends = (flags.choices("--attention-backend") or None) if flags is not None else None
    source = "help" if backends else "builtin"
    if profile.engine == "vllm" and not backends:
        rres = await run(cmds["registry"], 120.0)
        names = tuple(rres.stdout.split()) if rres.ok else ()
        if names and all(re.match(r"^[A-Z0-9_]+$", n) for n in names):
            backends, source = names, "registry"
        else:
            problems.append("vLLM backend registry: could not read it; using tunedeck's list for vLLM 0.33")
    if not backends:
        backends = BUILTIN_BACKENDS[profile.engine]
        source = "builtin"
    spec = (flags.choices("--speculative-algorithm") or None) if flags is not None else None
    facts = HostFacts(
        target=target,
        engine=profile.engine,
        executable=exe,
        version=version,
        backends=backends,
        backends_source=source,
        spec_algorithms=spec,
        flags=flags,
        gpus=gpus,
        problems=tuple(problems),
    )
    if key and flags is not None:
        _store_cache(
            key,
            {
                "backends": list(backends) if source != "builtin" else None,
                "backends_source": source,
                "spec": list(spec) if spec else None,
                "flags": [[list(f.names), f.nargs, list(f.choices)] for f in flags.flags],
            },
        )
    return facts


def _cached_flags(entry: Any) -> tuple[Flag, ...] | None:
    """A cache entry's flags ([names, nargs, choices] each); None for an older or damaged entry."""
    if not isinstance(entry, list):
        return None
    out = []
    for item in entry:
        if not (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], list)
            and isinstance(item[1], str)
            and isinstance(item[2], list)
            and all(isinstance(x, str) for x in [*item[0], *item[2]])
        ):
            return None
        out.append(Flag(tuple(item[0]), item[1], tuple(item[2])))
    return tuple(out) if len(out) >= 3 else None


__all__ = [
    "GPU_QUERY",
    "GpuInfo",
    "HostFacts",
    "host_flags",
    "parse_gpus",
    "parse_version",
    "probe_commands",
    "probe_host",
]
