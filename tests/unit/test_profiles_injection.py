"""No injection: for any form values the builder refuses with a message, or the shell line it
shows, run by a real /bin/sh, starts the executable with exactly the argv and env chosen.

The executable is swapped (as in the demo) for a script that dumps its argv and environment
NUL-separated. The same check over SSH uses the lead's sshd fixture with ``SshHost.run_script``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunedeck.hostops.localhost import LocalHost
from tunedeck.profiles.builder import Command, check_profile
from tunedeck.profiles.model import ServerProfile, Speculative
from tunedeck.profiles.schema import FLAGS
from tunedeck.profiles.store import ProfileStore
from tunedeck.util.safety import UnsafeInput, env_command

# no shell variables of its own: a loop variable would clobber an exported one of the same name
DUMP = """#!/bin/sh
printf '%s\\0' "$@"
printf '\\001ENV\\0'
exec {env} -0
"""

NASTY = [
    "",
    " ",
    "a b",
    "$(id)",
    "`id`",
    "'",
    '"',
    "\\",
    ";",
    "|",
    "&&",
    "*",
    "~",
    "$HOME",
    "\t",
    "=",
    "-x",
    "--y",
    "é",
    "日本",
    "a\nb",
    "\x00",
    "\x1b[31m",
    "%s",
    "!!",
    "#",
    "{a,b}",
    ">",
    "<(x)",
]

texts = st.one_of(
    st.sampled_from(NASTY),
    st.text(max_size=12),
    st.builds(lambda a, b: a + b, st.sampled_from(NASTY), st.text(max_size=6)),
)
#: variables /bin/sh itself rewrites at start-up (not something the builder controls)
SH_OWN = {"PWD", "OLDPWD", "IFS", "PS1", "PS2", "PS4", "OPTIND", "SHLVL", "_", "ENV", "LINENO", "PPID"}
env_names = st.one_of(
    st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,8}\Z"),
    texts,
    st.sampled_from(["PATH", "LD_PRELOAD", "NCCL_PROTO", "PYTHONPATH"]),
).filter(lambda k: k not in SH_OWN)


#: printable text with shell metacharacters, quotes and unicode, never a control character
safe_text = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc"), whitelist_characters="\t"), max_size=16)
safe_value = st.one_of(
    st.sampled_from([n for n in NASTY if (n and n[0] != "-" and n.isprintable()) or n == "\t"]),
    safe_text.map(lambda t: "v" + t),
)
safe_path = safe_value.filter(lambda t: ".." not in t.split("/"))


@st.composite
def valid_flags(draw, engine: str):
    out = []
    for spec in draw(
        st.lists(
            st.sampled_from([s for s in FLAGS[engine].values() if not s.managed]),
            max_size=4,
            unique_by=lambda s: s.name,
        )
    ):
        if spec.type == "bool":
            v = draw(st.booleans())
        elif spec.type == "int":
            v = draw(st.integers(-1, 10**6))
        elif spec.type == "float":
            v = draw(st.floats(0, 1))
        elif spec.choices:
            v = draw(st.sampled_from(spec.choices))
        elif spec.type == "json":
            v = json.dumps(draw(st.dictionaries(safe_text, safe_text, max_size=2)))
        else:
            v = draw(safe_value)
        out.append((spec.name, v))
    return tuple(out)


anything = st.one_of(texts, st.integers(-10, 10**6), st.booleans(), st.floats(allow_nan=True))
FIELDS = (
    "model",
    "tp",
    "host",
    "port",
    "python",
    "attention_backend",
    "flags",
    "extra_args",
    "env",
    "nccl_overrides",
    "speculative",
)


@st.composite
def profiles(draw) -> tuple[ServerProfile, bool]:
    """Mostly valid but shell-hostile values, with 0-2 fields replaced by arbitrary input."""
    engine = draw(st.sampled_from(["sglang", "vllm"]))
    env_items = st.dictionaries(
        st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,8}\Z").filter(lambda k: k not in SH_OWN), safe_value, max_size=4
    )
    spec = None
    if draw(st.booleans()):
        spec = Speculative(
            algorithm=draw(st.sampled_from(["EAGLE3", "NGRAM"] if engine == "sglang" else ["eagle3", "ngram"])),
            draft_model=draw(safe_path),
            num_steps=draw(st.integers(1, 8)) if engine == "vllm" else None,
        )
    kw = dict(
        model=draw(safe_path),
        tp=draw(st.integers(1, 64)),
        host=draw(st.sampled_from(["", "0.0.0.0", "127.0.0.1", "::1", "gpu-box.local"])),
        port=draw(st.integers(0, 65535)),
        python=draw(st.sampled_from(["python3", "/opt/venv a/bin/python3"])),
        attention_backend=draw(st.one_of(st.just(""), st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,10}\Z"))),
        flags=draw(valid_flags(engine)),
        extra_args=draw(
            st.sampled_from(
                [
                    "",
                    "--page-size 64",
                    "--served-model-name 'a b $x'",
                    '--chat-template "{{ x }}"',
                    "--max-num-seqs=8 --enforce-eager",
                    "--chunked-prefill-size -1",
                    "-q fp8",
                ]
            )
        ),
        env=tuple(draw(env_items).items()),
        nccl_overrides=tuple(draw(env_items).items()),
        speculative=spec,
    )
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=2, unique=True)):
        if name in ("env", "nccl_overrides"):
            kw[name] = tuple(draw(st.dictionaries(env_names, texts, min_size=1, max_size=3)).items())
        elif name == "flags":
            kw[name] = tuple(
                draw(
                    st.lists(
                        st.tuples(st.one_of(st.sampled_from(sorted(FLAGS[engine])), texts), anything),
                        min_size=1,
                        max_size=3,
                    )
                )
            )
        elif name == "speculative":
            kw[name] = Speculative(
                algorithm=draw(texts),
                draft_model=draw(texts),
                num_steps=draw(st.one_of(st.none(), st.integers(1, 8))),
                eagle_topk=draw(st.one_of(st.none(), st.integers(1, 8))),
            )
        else:
            kw[name] = draw(anything)
    p = ServerProfile(
        name="h",
        engine=engine,
        nccl_preset=draw(st.sampled_from(["default", "pcie", "nvlink", "debug"])),
        allow_unlisted_flags=draw(st.booleans()),
        **kw,
    )
    return p, draw(st.booleans())


def _run_through_sh(cmd: Command) -> tuple[list[str], dict[str, str]]:
    # the command as launched (the display redacts secret values; this is the same text without)
    text = env_command(list(cmd.argv), dict(cmd.env))

    async def go():
        return await LocalHost().run_script(text, timeout=20)

    r = asyncio.run(go())
    assert r.ok, (cmd.display, r.stderr)
    return parse_dump(r.stdout)


def parse_dump(out: str) -> tuple[list[str], dict[str, str]]:
    """The dump script's output: NUL-terminated argv, a marker, then ``env -0``."""
    args_part, _, env_part = out.partition("\x01ENV\x00")
    argv = args_part.split("\x00")[:-1]
    env = {}
    for item in env_part.split("\x00"):
        if item:
            k, _, v = item.partition("=")
            env[k] = v
    return argv, env


@pytest.fixture(scope="module")
def dump_exe(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("dump") / "dump argv"  # a space in the executable's path too
    d.write_text(DUMP.format(env=shutil.which("env")))  # absolute: PATH may be a chosen value
    d.chmod(0o755)
    return str(d)


@pytest.fixture(scope="module")
def presets():
    store = ProfileStore(user=Path("/nonexistent-user-profiles"))
    return {p.name: p for p in store.nccl_presets()}


def check_roundtrip(profile: ServerProfile, allow: bool, exe: str, presets) -> bool:
    try:
        cmd, issues = check_profile(profile, nccl=presets[profile.nccl_preset], allow_dangerous=allow, executable=[exe])
    except UnsafeInput:  # pragma: no cover - the builder reports through issues
        return False
    if cmd is None:
        errs = [i for i in issues if i.severity == "error"]
        assert errs and all(i.message for i in errs)
        return False
    argv, env = _run_through_sh(cmd)
    assert argv == list(cmd.args)
    for k, v in cmd.env:
        assert env.get(k) == v, (k, v, env.get(k))
    # the chosen values arrived unchanged
    if profile.engine == "sglang":
        assert f"--model-path={profile.model}" in argv
    else:
        assert argv[0] == profile.model
    for k, v in profile.env:
        assert env[k] == v
    return True


@pytest.mark.timeout(600)
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(profiles())
def test_any_form_values_are_refused_or_exact(dump_exe, presets, case):
    profile, allow = case
    check_roundtrip(profile, allow, dump_exe, presets)


def test_nasty_but_allowed_values_arrive_exactly(dump_exe, presets):
    p = ServerProfile(
        name="n",
        engine="sglang",
        model="/models/a b;$(id)`id`'\"\\*~é",
        attention_backend="fa3",
        nccl_preset="pcie",
        nccl_overrides=(("NCCL_DEBUG_FILE", "/tmp/nccl.%h.%p $x"),),
        flags=(("served-model-name", "x' ; echo pwned; '"), ("chat-template", "{{ a }} $(b) \t|")),
        extra_args="--page-size 64 --tokenizer-path '/t/a b' --chunked-prefill-size -1",
        env=(("HF_HOME", "$HOME/`x`"), ("A", "=b=c"), ("U", "日本\tz")),
    )
    assert check_roundtrip(p, False, dump_exe, presets)
    v = p.with_(engine="vllm", flags=(("served-model-name", "y z"),), extra_args='-cc \'{"a": [1, "$x"]}\'')
    assert check_roundtrip(v, False, dump_exe, presets)
