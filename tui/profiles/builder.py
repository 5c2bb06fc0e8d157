"""Profile → the exact argv and environment that launch the engine.

SGLang::

    python3 -m sglang.launch_server --model-path=M --tp-size=8 --host=H --port=P \
        --attention-backend=B … --enable-metrics

vLLM::

    vllm serve M --tensor-parallel-size=8 --host=H --port=P --attention-backend=B \
        --speculative-config={"method":…}

Every flag is one token: full name, ``--flag=value`` for values, bare ``--flag`` for booleans.
Flags come from the per-engine allowlist in :mod:`tunedeck.profiles.schema` with types, else from the
engine release's own flags (:mod:`tunedeck.engine_flags`: the host's ``--help`` when pre-flight read it,
else tunedeck's table of the release it follows), judged by argparse's rules
(:mod:`tunedeck.profiles.flagcheck`); free-text ``extra_args`` are ``shlex.split`` and checked token
by token the same way. String values that
start with ``-`` are refused. The environment is ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` + the NCCL
preset + its per-variable overrides + the profile's ``[env]``; dangerous variables (LD_PRELOAD,
PATH, PYTHONPATH, …) need an explicit confirmation. In the demo only the executable changes:
``tunedeck sim sglang …`` / ``tunedeck sim vllm M …`` take the same flags.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from tunedeck.engine_flags import FlagTable
from tunedeck.engines import SGLANG_SPEC_ALGORITHMS, VLLM_SPEC_METHODS, release_flags
from tunedeck.profiles.flagtokens import NUM_RE, FlagChecker, Issue
from tunedeck.profiles.model import FLAG_NAME_RE, NcclPreset, ProfileError, ServerProfile
from tunedeck.profiles.presets import DEFAULT_NCCL, merge_nccl
from tunedeck.profiles.schema import ALIASES, FLAGS
from tunedeck.profiles.tomlread import CONTROL_RE
from tunedeck.util.safety import DANGEROUS_ENV, ENV_NAME_RE, UnsafeInput, env_command, redact_argv, redact_env

if TYPE_CHECKING:
    from tunedeck.profiles.store import ProfileStore

_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]*$|^\[[0-9A-Fa-f:.]+\]$")
_BACKEND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True, slots=True)
class Command:
    """What runs: ``argv`` with ``env`` added; ``argv[:prefix_len]`` is the executable part."""

    engine: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    prefix_len: int
    display: str
    warnings: tuple[Issue, ...] = ()
    demo: bool = False

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def executable(self) -> tuple[str, ...]:
        return self.argv[: self.prefix_len]

    @property
    def args(self) -> tuple[str, ...]:
        return self.argv[self.prefix_len :]

    def jsonable(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "argv": redact_argv(self.argv),
            "env": redact_env(dict(self.env)),
            "executable": list(self.executable),
            "command": self.display,
            "demo": self.demo,
            "warnings": [{"severity": w.severity, "key": w.key, "message": w.message} for w in self.warnings],
        }


def demo_executable(engine: str) -> list[str]:
    """The simulator standing in for the engine: ``tunedeck sim <engine>`` (the demo host puts a
    ``tunedeck`` shim first on its PATH, so this runs there even without an installed script)."""
    return ["tunedeck", "sim", engine]


def engine_executable(profile: ServerProfile) -> list[str]:
    if profile.engine == "sglang":
        return [profile.python, "-m", "sglang.launch_server"]
    if profile.python == "python3":
        return ["vllm", "serve"]
    return [profile.python, "-m", "vllm.entrypoints.cli.main", "serve"]


class _Build(FlagChecker):
    """The parts of a profile's command, each field checked (:class:`FlagChecker`)."""

    # ------------------------------------------------------------------ parts
    def types_ok(self) -> bool:
        """Form input arrives untyped: every text field must be text before anything else."""
        p = self.p
        n = len(self.issues)
        for key, v in (
            ("model", p.model),
            ("host", p.host),
            ("python", p.python),
            ("attention.backend", p.attention_backend),
            ("attention.prefill", p.prefill_backend),
            ("attention.decode", p.decode_backend),
            ("extra_args", p.extra_args),
            ("nccl.preset", p.nccl_preset),
        ):
            if not isinstance(v, str):
                self.error(key, f"expected text, got {type(v).__name__}")
        for key, n_ in (("tp", p.tp), ("port", p.port)):
            if isinstance(n_, bool) or not isinstance(n_, int):
                self.error(key, f"expected an integer, got {type(n_).__name__}")
        for table, items in (("env", p.env), ("nccl.overrides", p.nccl_overrides), ("flags", p.flags)):
            for item in items:
                if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
                    self.error(table, f"malformed entry {item!r}")
                elif table != "flags" and not isinstance(item[1], str):
                    self.error(f"{table}.{item[0]}", f"expected text, got {type(item[1]).__name__}")
                elif table == "flags" and not isinstance(item[1], (bool, int, float, str)):
                    self.error(
                        f"flags.{item[0]}", f"expected true/false, a number or text, got {type(item[1]).__name__}"
                    )
        sp = p.speculative
        if sp is not None:
            for key in ("algorithm", "draft_model"):
                if not isinstance(getattr(sp, key), str):
                    self.error(f"speculative.{key}", "expected text")
            for key in ("num_steps", "eagle_topk", "num_draft_tokens"):
                v = getattr(sp, key)
                if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                    self.error(f"speculative.{key}", f"expected a positive integer, got {v!r}")
        return len(self.issues) == n

    def core(self) -> list[str]:
        p = self.p
        out: list[str] = []
        if not p.model:
            self.error("model", "model path must not be empty")
        elif self.text(p.model, "model"):
            if ".." in p.model.replace("\\", "/").split("/"):
                self.error("model", "model path must not contain '..'")
        if not isinstance(p.tp, int) or isinstance(p.tp, bool) or not 1 <= p.tp <= 1024:
            self.error("tp", f"tensor parallel size must be 1..1024, got {p.tp!r}")
        if not isinstance(p.port, int) or isinstance(p.port, bool) or not 0 <= p.port <= 65535:
            self.error("port", f"port must be 1..65535, got {p.port!r}")
        if p.host and not _HOST_RE.match(p.host):
            self.error("host", f"invalid bind address {p.host!r}")
        if p.engine == "sglang":
            self.seen.update({"model-path": "model", "tp-size": "tp", "port": "port"})
            out += [f"--model-path={p.model}", f"--tp-size={p.tp}"]
        else:
            self.seen.update({"tensor-parallel-size": "tp", "port": "port"})
            out += [p.model, f"--tensor-parallel-size={p.tp}"]
        if p.host:
            self.seen["host"] = "host"
            out.append(f"--host={p.host}")
        out.append(f"--port={p.effective_port}")
        for value, flag, key in (
            (p.attention_backend, "attention-backend", "attention.backend"),
            (p.prefill_backend, "prefill-attention-backend", "attention.prefill"),
            (p.decode_backend, "decode-attention-backend", "attention.decode"),
        ):
            if not value:
                continue
            if p.engine == "vllm" and flag != "attention-backend":
                self.error(key, "per-phase attention backends exist only on SGLang")
                continue
            if not _BACKEND_RE.match(value):
                self.error(key, f"invalid backend name {value!r}")
                continue
            self.seen[flag] = key
            out.append(f"--{flag}={value}")
        return out

    def managed(self, items: Sequence[tuple[str, object]], key: str) -> list[str]:
        """Flags a multi-node deployment sets for each node (``key`` names where they come from)."""
        out = []
        for name, value in items:
            tok = self.flag(name, value, key, managed_ok=True)
            if tok:
                out.append(tok)
        return out

    def speculative(self) -> list[str]:
        s = self.p.speculative
        if s is None or not (s.algorithm or s.draft_model):
            return []
        out: list[str] = []
        if not s.algorithm:
            self.error("speculative.algorithm", "set the algorithm (or remove [speculative])")
            return []
        if s.draft_model and self.text(s.draft_model, "speculative.draft_model"):
            if ".." in s.draft_model.split("/"):
                self.error("speculative.draft_model", "draft model path must not contain '..'")
        nums = (s.num_steps, s.eagle_topk, s.num_draft_tokens)
        if self.p.engine == "sglang":
            if s.algorithm not in SGLANG_SPEC_ALGORITHMS:
                self.error(
                    "speculative.algorithm",
                    f"unknown SGLang algorithm {s.algorithm!r} (one of {', '.join(SGLANG_SPEC_ALGORITHMS)})",
                )
                return []
            if any(n is not None for n in nums) and not all(n is not None for n in nums):
                self.error(
                    "speculative",
                    "set num_steps, eagle_topk and num_draft_tokens together, or none of them",
                )
            if s.eagle_topk == 1 and s.num_steps and s.num_draft_tokens and s.num_draft_tokens != s.num_steps + 1:
                self.warn(
                    "speculative.num_draft_tokens",
                    f"with eagle_topk = 1 SGLang uses num_steps + 1 = {s.num_steps + 1} draft tokens",
                )
            out.append(f"--speculative-algorithm={s.algorithm}")
            if s.draft_model:
                out.append(f"--speculative-draft-model-path={s.draft_model}")
            for flag, v in zip(("num-steps", "eagle-topk", "num-draft-tokens"), nums):
                if v is not None:
                    out.append(f"--speculative-{flag}={v}")
            for f in (
                "speculative-algorithm",
                "speculative-draft-model-path",
                "speculative-num-steps",
                "speculative-eagle-topk",
                "speculative-num-draft-tokens",
            ):
                self.seen[f] = "speculative"
            return out
        method = s.algorithm.lower()
        if method not in VLLM_SPEC_METHODS:
            self.error(
                "speculative.algorithm",
                f"unknown vLLM method {s.algorithm!r} (one of {', '.join(VLLM_SPEC_METHODS)})",
            )
            return []
        if s.eagle_topk is not None or s.num_draft_tokens is not None:
            self.error(
                "speculative",
                "vLLM takes only num_steps (num_speculative_tokens); unset eagle_topk and num_draft_tokens",
            )
        cfg: dict[str, object] = {"method": method}
        if s.draft_model:
            cfg["model"] = s.draft_model
        if s.num_steps is not None:
            cfg["num_speculative_tokens"] = s.num_steps
        self.seen["speculative-config"] = "speculative"
        return ["--speculative-config=" + json.dumps(cfg, separators=(",", ":"), ensure_ascii=False)]

    def table_flags(self) -> list[str]:
        out = []
        for name, value in self.p.flags:
            key = f"flags.{name}"
            if not FLAG_NAME_RE.match(name):
                self.error(key, f"invalid flag name {name!r}")
                continue
            tok = self.flag(name, value, key)
            if tok:
                out.append(tok)
        return out

    def extra(self) -> list[str]:
        text = self.p.extra_args
        if not text.strip():
            return []
        m = CONTROL_RE.search(text)
        if m:
            self.error("extra_args", f"contains a control character {m.group()!r}")
            return []
        try:
            toks = shlex.split(text)
        except ValueError as e:
            self.error("extra_args", f"cannot split: {e}")
            return []
        out: list[str] = []
        aliases = ALIASES[self.p.engine]
        i = 0
        while i < len(toks):
            tok = toks[i]
            i += 1
            key = f"extra_args[{tok.split('=', 1)[0]}]"
            m = re.match(r"^(-{1,2})([A-Za-z0-9][A-Za-z0-9_-]*)(?:=(.*))?$", tok, re.S)
            if not m or (m.group(1) == "-" and m.group(2) not in aliases):
                self.error(key, f"{tok!r} is not a --flag or --flag=value (a value goes right after its flag)")
                continue
            name, value = m.group(2), m.group(3)
            if name in aliases and (m.group(1) == "-" or name not in self.schema):
                name = aliases[name]
            if not FLAG_NAME_RE.match(name):
                self.error(key, f"invalid flag name {tok!r}")
                continue
            spec = self.known_spec(name)
            numeric = spec is not None and spec.type in ("int", "float")
            if value is None:
                nxt = toks[i] if i < len(toks) else None
                if spec is not None and spec.type == "bool":
                    value = True
                elif nxt is not None and (not nxt.startswith("-") or (numeric and NUM_RE.match(nxt))):
                    value = nxt
                    i += 1
                elif spec is None:
                    value = True  # an unlisted switch
                elif nxt is not None and not nxt.startswith("--"):
                    self.error(key, f"--{name} needs a value; the next token {nxt!r} starts with '-'")
                    i += 1
                    continue
                else:
                    self.error(key, f"--{name} needs a value")
                    continue
            if isinstance(value, str) and value.startswith("-") and not (numeric and NUM_RE.match(value)):
                self.error(key, f"value {value!r} for --{name} starts with '-'")
                continue
            t = self.flag(name, value, key)
            if t:
                out.append(t)
        return out

    def environment(self, nccl: NcclPreset, allow_dangerous: bool) -> list[tuple[str, str]]:
        p = self.p
        env: dict[str, str] = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        if nccl.warning:
            self.warn("nccl.preset", f"{nccl.name}: {nccl.warning}")
        for k, _ in p.nccl_overrides:
            if not ENV_NAME_RE.match(k):
                self.error(f"nccl.overrides.{k}", f"invalid environment variable name {k!r}")
        for k, v in merge_nccl(nccl, tuple((k, v) for k, v in p.nccl_overrides if ENV_NAME_RE.match(k))).items():
            env[k] = v
        for k, v in p.env:
            if not ENV_NAME_RE.match(k):
                self.error(f"env.{k}", f"invalid environment variable name {k!r} (must match [A-Za-z_][A-Za-z0-9_]*)")
                continue
            env[k] = v
        for k, v in list(env.items()):
            m = CONTROL_RE.search(v)
            if m:
                where = "env" if any(k == n for n, _ in p.env) else "nccl.overrides"
                self.error(f"{where}.{k}", f"contains a control character {m.group()!r}")
                env.pop(k)
        for k in sorted(env):
            if k in DANGEROUS_ENV:
                where = "env" if any(k == n for n, _ in p.env) else "nccl.overrides"
                if allow_dangerous or k in p.confirm_dangerous:
                    self.warn(f"{where}.{k}", f"{k} changes what gets executed (confirmed)")
                else:
                    self.error(
                        f"{where}.{k}",
                        f'{k} changes what gets executed; confirm it (confirm_dangerous = ["{k}"] '
                        "or --allow-dangerous-env)",
                    )
        return list(env.items())


def check_profile(
    profile: ServerProfile,
    *,
    nccl: NcclPreset | None = None,
    demo: bool = False,
    allow_dangerous: bool = False,
    executable: Sequence[str] | None = None,
    managed_args: Sequence[tuple[str, object]] = (),
    managed_key: str = "nodes",
    flags: FlagTable | None = None,
) -> tuple[Command | None, list[Issue]]:
    """Build the command and collect every validation message; the command is None on errors.

    ``managed_args`` are flags set for this command by someone else (a multi-node deployment:
    ``--nnodes``, ``--node-rank``, …); the same flag in ``[flags]`` or ``extra_args`` is an error
    naming ``managed_key``. ``flags`` are the host engine's (pre-flight read its ``--help``);
    without them tunedeck's table of the release it follows judges what the schema does not list."""
    if profile.engine not in FLAGS:
        return None, [Issue("error", "engine", f"unknown engine {profile.engine!r} (sglang or vllm)")]
    b = _Build(profile, flags if flags is not None else release_flags(profile.engine))
    if nccl is None:
        nccl = DEFAULT_NCCL
        if profile.nccl_preset != "default":
            b.error("nccl.preset", f"NCCL preset {profile.nccl_preset!r} was not resolved")
    if executable is not None:
        prefix = list(executable)
    elif demo:
        prefix = demo_executable(profile.engine)
    else:
        prefix = engine_executable(profile)
        if (
            isinstance(profile.python, str)
            and b.text(profile.python, "python")
            and (not profile.python or profile.python.strip() != profile.python or "=" in profile.python)
        ):
            b.error("python", f"invalid interpreter {profile.python!r} (a path or command name without '=')")
    if not b.types_ok():
        return None, b.issues
    args = b.core() + b.managed(managed_args, managed_key) + b.speculative() + b.table_flags() + b.extra()
    env = b.environment(nccl, allow_dangerous)
    if any(i.severity == "error" for i in b.issues):
        return None, b.issues
    argv = prefix + args
    try:
        env_command(argv, dict(env))  # validates every field
        # what is shown (previews, `profiles command`, JSON): secret values redacted
        display = env_command(redact_argv(argv), redact_env(dict(env)))
    except UnsafeInput as e:  # pragma: no cover - every field was checked above
        return None, b.issues + [Issue("error", "", str(e))]
    cmd = Command(
        engine=profile.engine,
        argv=tuple(argv),
        env=tuple(env),
        prefix_len=len(prefix),
        display=display,
        warnings=tuple(b.issues),
        demo=demo and executable is None,
    )
    return cmd, b.issues


def build_command(
    profile: ServerProfile,
    *,
    demo: bool = False,
    nccl: NcclPreset | None = None,
    store: ProfileStore | None = None,
    allow_dangerous: bool = False,
    executable: Sequence[str] | None = None,
) -> Command:
    """The exact command for ``profile``; raises :class:`ProfileError` naming the first bad field.

    ``nccl`` is the resolved preset; when omitted it is looked up in ``store`` (a
    :class:`~tunedeck.profiles.store.ProfileStore`, default: the standard one).
    """
    if nccl is None:
        nccl = resolve_nccl(profile, store)
    cmd, issues = check_profile(profile, nccl=nccl, demo=demo, allow_dangerous=allow_dangerous, executable=executable)
    if cmd is None:
        first = next(i for i in issues if i.severity == "error")
        more = sum(1 for i in issues if i.severity == "error") - 1
        msg = first.message + (f" (and {more} more problem{'s' if more > 1 else ''})" if more > 0 else "")
        raise ProfileError(
            msg, path=profile.path or f"profile {profile.name}", key=first.key, line=line_of_key(profile, first.key)
        )
    return cmd


def resolve_nccl(profile: ServerProfile, store: ProfileStore | None = None) -> NcclPreset:
    if profile.nccl_preset == "default":
        return DEFAULT_NCCL
    if store is None:
        from tunedeck.profiles.store import ProfileStore

        store = ProfileStore()
    return store.nccl_preset(profile.nccl_preset)


def line_of_key(profile: ServerProfile, key: str) -> int | None:
    if not profile.path or not key:
        return None
    from pathlib import Path

    from tunedeck.profiles.tomlread import key_line

    try:
        text = Path(profile.path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    parts = re.sub(r"\[.*$", "", key).split(".")
    if key.startswith("extra_args"):
        parts = ["extra_args"]
    return key_line(text, tuple(parts))


__all__ = [
    "Command",
    "Issue",
    "build_command",
    "check_profile",
    "demo_executable",
    "engine_executable",
    "line_of_key",
    "resolve_nccl",
]
