"""Pre-flight check: before a ~10-minute launch, ask the host whether the profile can work there.

On the target :class:`~tunedeck.hostops.hosts.Host` it reads

* the engine version (SGLang: ``python3 -c 'import sglang; print(sglang.__version__)'``;
  vLLM: ``vllm --version``; the demo: ``tunedeck sim <engine> --version``),
* the engine's ``--help`` with the *same executable* the launch uses (SGLang
  ``python3 -m sglang.launch_server --help``; vLLM ``vllm serve --help=all``, then ``--help``;
  the demo ``tunedeck sim <engine> --help``), read with :func:`tunedeck.engine_flags.parse_help` into
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
in ``state_dir()/preflight-cache.json``. The reading is :mod:`tunedeck.profiles.hostfacts`; the
findings are here.
"""

from __future__ import annotations

import asyncio
import shlex
from dataclasses import dataclass
from typing import Any, Sequence

from tunedeck.engine_flags import FlagTable
from tunedeck.engines import release_flags
from tunedeck.profiles.builder import Command, Issue, check_profile, resolve_nccl
from tunedeck.profiles.flagcheck import judge
from tunedeck.profiles.hostfacts import HostFacts, probe_host
from tunedeck.profiles.model import ProfileError, ServerProfile
from tunedeck.profiles.schema import MLA_TABLE, NOT_MLA
from tunedeck.util.ports import UNKNOWN, port_owners
from tunedeck.util.safety import visible


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
        from tunedeck.profiles.presets import DEFAULT_NCCL

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


__all__ = ["Finding", "PreflightReport", "evaluate", "preflight"]
