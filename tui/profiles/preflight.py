"""Pre-flight check: before a ~10-minute launch, ask the host whether the profile can work there.

On the target :class:`~tui.hostops.hosts.Host` it reads

* the engine version (SGLang: ``python3 -c 'import sglang; print(sglang.__version__)'``;
  vLLM: ``vllm --version``; the demo: ``tunedeck sim <engine> --version``),
* the engine's ``--help`` with the *same executable* the launch uses (SGLang
  ``python3 -m sglang.launch_server --help``; vLLM ``vllm serve --help=all``, then ``--help``;
  the demo ``tunedeck sim <engine> --help``), read with :func:`tui.engine_flags.parse_help` into
  the host's flag table (names, aliases, values, choices; the attention-backend choices among
  them): when it was read it is the authority for every flag of the command; when it was not,
  tunedeck's table of the release it follows stands in and the findings say so,
* vLLM's backend list from its registry (the flag is enum-typed, so ``--help`` lists nothing):
  ``python3 -c "from vllm.v1.attention.backends.registry import AttentionBackendEnum as E; …"``;
  the demo asks the simulator the same question with the same executable:
  ``tunedeck sim vllm --sim-list-backends`` (one line, space-separated names),
* the GPUs: ``nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader``,

and turns them into findings (error / warning / info): a backend that engine version does not
offer, a backend unsupported on that GPU architecture for MLA models (serving-engines.md §2.2;
"unverified" where the table has no answer), a flag by argparse's rules (unknown: the closest
real flag suggested; an ambiguous prefix such as ``--cuda-graph-max-bs`` on SGLang 0.5.23: the
candidates named; an unambiguous prefix: a note; a value outside the flag's choices: the
choices listed), TP above the GPU count, dangerous variables, and the
NCCL debugging-knob warning. Help-derived facts are cached per (host, engine executable, version)
in ``state_dir()/preflight-cache.json``.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from dataclasses import dataclass
from typing import Any, Sequence

from tui.engine_flags import Flag, FlagTable, parse_help
from tui.engines import release_flags
from tui.profiles.builder import Command, Issue, check_profile, demo_executable, engine_executable, resolve_nccl
from tui.profiles.flagcheck import judge
from tui.profiles.model import ProfileError, ServerProfile
from tui.profiles.schema import BUILTIN_BACKENDS, MLA_TABLE, NOT_MLA
from tui.util.files import atomic_write_json
from tui.util.paths import state_dir
from tui.util.ports import UNKNOWN, port_owners
from tui.util.safety import visible

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


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str  # "error" | "warning" | "info"
    code: str
    message: str
    subject: str = ""

    def __str__(self) -> str:
        return f"{self.severity}: {self.message}"

    @property
    def detail(self) -> str:
        """The message without the subject it may start with, for displays that show the subject
        themselves (``nccl.preset: …`` once, never ``nccl.preset: nccl.preset: …``)."""
        lead = f"{self.subject}: "
        return self.message[len(lead) :] if self.subject and self.message.startswith(lead) else self.message

    @property
    def line(self) -> str:
        """The subject (when there is one) and the message, the subject said once."""
        return f"{self.subject}: {self.detail}" if self.subject else self.message


@dataclass(frozen=True, slots=True)
class PreflightReport:
    profile: str
    facts: HostFacts
    findings: tuple[Finding, ...]
    command: Command | None = None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def jsonable(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "ok": self.ok,
            "host": self.facts.jsonable(),
            "command": self.command.display if self.command else None,
            "findings": [
                {"severity": f.severity, "code": f.code, "message": f.message, "subject": f.subject}
                for f in self.findings
            ],
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
    except OSError:
        pass


async def probe_host(
    host: Any,
    profile: ServerProfile,
    *,
    demo: bool = False,
    use_cache: bool = True,
    executable: Sequence[str] | None = None,
) -> HostFacts:
    """Read version, help, backend list and GPUs from ``host`` (a tui.hostops.hosts.Host);
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


# ------------------------------------------------------------------------------ findings


def _chosen_backends(p: ServerProfile) -> list[tuple[str, str]]:
    return [
        (k, v)
        for k, v in (
            ("attention.backend", p.attention_backend),
            ("attention.prefill", p.prefill_backend),
            ("attention.decode", p.decode_backend),
        )
        if v
    ]


def evaluate(
    profile: ServerProfile, facts: HostFacts, command: Command | None, issues: Sequence[Issue] = ()
) -> list[Finding]:
    out: list[Finding] = []
    eng = f"{profile.engine} {facts.version}" if facts.version else profile.engine
    where = facts.target
    for i in issues:
        code = (
            "nccl-debug-knobs"
            if i.key == "nccl.preset"
            else ("dangerous-env" if "changes what gets executed" in i.message else "profile")
        )
        out.append(Finding(i.severity, code, f"{i.key}: {i.message}" if i.key else i.message, i.key))
    if facts.version is None and facts.flags is None:
        out.append(
            Finding(
                "error",
                "engine-missing",
                f"{profile.engine} does not run on {where} with `{shlex.join(facts.executable)}` "
                "(neither its version nor its --help could be read): the launch would fail",
                "python",
            )
        )
    for p in facts.problems:
        out.append(Finding("warning", "probe", p))

    # -- backends offered by this engine version
    def norm(s: str) -> str:
        return s.upper() if profile.engine == "vllm" else s

    offered = {norm(b) for b in facts.backends or ()}
    for key, b in _chosen_backends(profile):
        if norm(b) in offered or (profile.engine == "vllm" and b.lower() == "auto"):
            continue
        if facts.backends_source == "builtin":
            out.append(
                Finding(
                    "warning",
                    "backend-unverified",
                    f"attention backend {b!r} is not in tunedeck's list for {profile.engine} and the host's "
                    "list could not be read: unverified",
                    key,
                )
            )
        else:
            out.append(
                Finding(
                    "error",
                    "backend-not-offered",
                    f"attention backend {b!r} is not offered by {eng} on {where} "
                    f"(choices: {', '.join(facts.backends or ())})",
                    key,
                )
            )

    # -- MLA × architecture
    majors = sorted({g.major for g in facts.gpus or () if g.major is not None})
    if profile.is_mla and facts.gpus is not None:
        table = MLA_TABLE[profile.engine]
        chosen = _chosen_backends(profile)
        if not chosen:
            out.append(Finding("info", "mla-auto", f"MLA model: {profile.engine} picks the attention backend itself"))
        for key, b in chosen:
            nb = norm(b)
            for major in majors:
                sm = f"SM{major}0"
                row = table.get(major)
                if nb in {norm(x) for x in NOT_MLA[profile.engine]}:
                    out.append(
                        Finding("error", "backend-arch", f"{b!r} does not run MLA models ({profile.model})", key)
                    )
                    break
                if row is None:
                    out.append(
                        Finding(
                            "warning",
                            "backend-arch-unverified",
                            f"{b!r} for MLA models on {sm} (compute capability {major}.x): unverified",
                            key,
                        )
                    )
                elif nb in {norm(x) for x in row["valid"]}:
                    continue
                elif nb in {norm(x) for x in row["verify"]}:
                    out.append(
                        Finding(
                            "warning",
                            "backend-arch-unverified",
                            f"{b!r} passes argument checks on {sm} for MLA models but is unverified there; verify on the host",
                            key,
                        )
                    )
                else:
                    valid = ", ".join(sorted(row["valid"]))
                    out.append(
                        Finding(
                            "error",
                            "backend-arch",
                            f"{b!r} is not supported for MLA models on {sm} (valid there: {valid})",
                            key,
                        )
                    )
    elif profile.is_mla and facts.gpus is None and _chosen_backends(profile):
        out.append(
            Finding(
                "warning", "backend-arch-unverified", "GPU architecture unknown: the MLA backend choice is unverified"
            )
        )

    # -- speculative
    s = profile.speculative
    if (
        s
        and s.algorithm
        and facts.spec_algorithms
        and profile.engine == "sglang"
        and s.algorithm not in facts.spec_algorithms
    ):
        out.append(
            Finding(
                "error",
                "spec-not-offered",
                f"speculative algorithm {s.algorithm!r} is not offered by {eng} "
                f"(choices: {', '.join(facts.spec_algorithms)})",
                "speculative.algorithm",
            )
        )
    if (
        s
        and profile.engine == "sglang"
        and (s.eagle_topk or 1) > 1
        and profile.attention_backend not in ("", "fa3", "triton")
    ):
        out.append(
            Finding(
                "warning",
                "spec-topk",
                f"speculative eagle_topk > 1 works only with fa3 or triton at page size 1 "
                f"(SGLang docs); {profile.attention_backend!r} is chosen",
                "speculative.eagle_topk",
            )
        )

    # -- flags: the host's --help is the authority; tunedeck's table only when it could not be read
    if command is not None:
        flags = facts.flags
        if flags is None:
            flags = release_flags(profile.engine)
            out.append(
                Finding(
                    "warning",
                    "flags-builtin",
                    f"could not read {profile.engine}'s --help on {where}: flags checked against "
                    f"{flags.origin} (the host's may differ)",
                )
            )
        out += _flag_findings(command, flags, host_read=facts.flags is not None)

    # -- bind address: loopback is the default; anything wider is a choice the user sees
    bind = (profile.host or "").strip()
    if bind and bind not in ("127.0.0.1", "localhost", "::1"):
        out.append(
            Finding(
                "warning",
                "bind-wide",
                f"the server binds {bind}: its API (no authentication) is reachable from other "
                f"machines; use 127.0.0.1 unless that is intended",
                "host",
            )
        )

    # -- GPUs
    if facts.gpus is not None:
        n = len(facts.gpus)
        if profile.tp > n:
            out.append(Finding("error", "tp-gpus", f"tensor parallel size {profile.tp} > {n} GPU(s) on {where}", "tp"))
        names = sorted({g.name for g in facts.gpus})
        caps = ", ".join(f"SM{m}0" for m in majors) or "unknown compute capability"
        out.append(Finding("info", "gpus", f"{n} × {' / '.join(names)} ({caps})"))
    if facts.version:
        out.append(
            Finding(
                "info",
                "engine",
                f"{eng} ({'cached' if facts.cached else 'read from host'}); "
                f"{len(facts.backends or ())} backends from {facts.backends_source}",
            )
        )
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(out, key=lambda f: order.get(f.severity, 3))


def _flag_findings(command: Command, table: FlagTable, *, host_read: bool) -> list[Finding]:
    """Each ``--flag[=value]`` of the command judged against ``table`` (argparse's rules)."""
    out: list[Finding] = []
    for tok in command.args:
        if not tok.startswith("--"):
            continue
        name, eq, value = tok.partition("=")
        v = judge(table, name, value if eq else None)
        if v.kind == "ok":
            continue
        if v.kind == "prefix":
            out.append(Finding("info", "flag-prefix", v.message, name))
            continue
        code = {"ambiguous": "flag-ambiguous", "unknown": "flag-unknown", "bad-choice": "flag-choice"}[v.kind]
        # tunedeck's own table only stands in for the host's: what it refuses is unverified there
        out.append(Finding("error" if host_read else "warning", code, v.message, name))
    return out


async def preflight(
    host: Any,
    profile: ServerProfile,
    *,
    demo: bool = False,
    store: Any = None,
    allow_dangerous: bool = False,
    use_cache: bool = True,
    executable: Sequence[str] | None = None,
    probe_executable: Sequence[str] | None = None,
) -> PreflightReport:
    """Probe ``host`` and check ``profile`` against it; nothing is launched.

    ``--sim``: ``executable`` is the simulator in the command (``tunedeck-host sim ENGINE``),
    ``probe_executable`` the same as it runs on the host (the runtime's archive)."""
    try:
        nccl = resolve_nccl(profile, store)
    except ProfileError as e:
        from tui.profiles.presets import DEFAULT_NCCL

        nccl = DEFAULT_NCCL
        extra = [Issue("error", "nccl.preset", e.message)]
    else:
        extra = []
    facts, port = await asyncio.gather(
        probe_host(host, profile, demo=demo, use_cache=use_cache, executable=probe_executable),
        check_port(host, profile.effective_port),
    )
    cmd, issues = check_profile(
        profile, nccl=nccl, demo=demo, allow_dangerous=allow_dangerous, executable=executable, flags=facts.flags
    )
    findings = evaluate(profile, facts, cmd, [*extra, *issues])
    if port is not None:
        findings = [port, *findings]
    return PreflightReport(profile=profile.name, facts=facts, findings=tuple(findings), command=cmd)


async def check_port(host: Any, port: int) -> Finding | None:
    """The profile's HTTP port on ``host``: already in use is an error naming the process that
    holds it (pid and name) where this user can see it. Never cached: ports come and go."""
    owner = await port_owners(host, port)
    if not owner.listening:
        if owner.state == UNKNOWN:
            return Finding("info", "port.unchecked", f"port {port}: not checked ({owner.reason})", "port")
        return None
    target = getattr(host, "target", None) or "the host"
    return Finding(
        "error",
        "port.in-use",
        f"port {port} is already in use on {visible(target)} by {owner.describe()}: "
        "a server started now could not serve there (stop that process or choose another port)",
        "port",
    )


__all__ = [
    "Finding",
    "GpuInfo",
    "HostFacts",
    "PreflightReport",
    "evaluate",
    "host_flags",
    "parse_gpus",
    "parse_version",
    "preflight",
    "probe_commands",
    "probe_host",
]
