"""Profiles: TOML parsing with file/line/key errors, the store (discovery, save, read-only built-ins),
the command builder per engine, the demo swap, and command diffs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tunedeck.profiles.builder import build_command, check_profile
from tunedeck.profiles.diff import diff_commands
from tunedeck.profiles.model import ProfileError, ServerProfile
from tunedeck.profiles.profileread import load_profile_file, load_profile_text
from tunedeck.profiles.store import ProfileStore, builtin_root, user_root

GOOD = """\
schema_version = 1
engine = "sglang"
model = "deepseek-ai/DeepSeek-V2-Lite-Chat"
tp = 8
port = 30001

[attention]
backend = "fa3"

[nccl]
preset = "pcie"

[nccl.overrides]
NCCL_BUFFSIZE = "8388608"
NCCL_NTHREADS = ""

[flags]
enable-metrics = true
mem-fraction-static = 0.85

[env]
SGLANG_ENABLE_JIT_DEEPGEMM = "0"
"""


@pytest.fixture
def user_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "user-profiles"
    monkeypatch.setenv("TUNEDECK_PROFILES", str(d))
    return d


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*tunedeck_cmd(), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


# ------------------------------------------------------------------------------ parsing errors


def test_good_profile_parses(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(GOOD)
    p = load_profile_file(f)
    assert (p.name, p.engine, p.tp, p.port, p.attention_backend, p.nccl_preset) == (
        "mine",
        "sglang",
        8,
        30001,
        "fa3",
        "pcie",
    )
    assert dict(p.flags) == {"enable-metrics": True, "mem-fraction-static": 0.85}
    assert p.is_mla


@pytest.mark.parametrize(
    "text, line, key, words",
    [
        ('engine = "sglang"\nmodel = "m"\ntp = = 8\n', 3, "tp", "TOML syntax error"),
        (
            'engine = "sglang"\nmodel = "m"\n\n[flags]\nenable-metrics = true\n\n[attention]\nbakend = "fa3"\n',
            8,
            "attention.bakend",
            "unknown key",
        ),
        ('engine = "sglang"\nmodel = "m"\ntensor_parallel = 8\n', 3, "tensor_parallel", "unknown key"),
        (
            'engine = "sglang"\nmodel = "m"\n[env]\nOK = "1"\n"BAD-NAME" = "x"\n',
            5,
            "env.BAD-NAME",
            "invalid environment variable name",
        ),
        (
            'engine = "sglang"\nmodel = "m"\n[nccl.overrides]\n"1NCCL" = "x"\n',
            4,
            "nccl.overrides.1NCCL",
            "invalid environment variable name",
        ),
        ('engine = "sglang"\nmodel = "m"\n[env]\nX = "a\\nb"\n', 4, "env.X", "control character"),
        ('engine = "sglang"\nmodel = "m"\ntp = "8"\n', 3, "tp", "expected an integer"),
        ('engine = "tgi"\nmodel = "m"\n', 1, "engine", "unknown engine"),
        ('schema_version = 9\nengine = "sglang"\nmodel = "m"\n', 1, "schema_version", "newer"),
    ],
)
def test_errors_name_file_line_key(tmp_path, text, line, key, words):
    f = tmp_path / "broken.toml"
    f.write_text(text)
    with pytest.raises(ProfileError) as ei:
        load_profile_file(f)
    e = ei.value
    assert (e.path, e.line, e.key) == (str(f), line, key), str(e)
    assert words in str(e)
    assert str(e).startswith(f"{f}:{line}: {key}:")


@pytest.mark.parametrize(
    "text, line, key",
    [
        ('engine = "sglang"\nmodel = "m"\n[flags\n', 3, "[flags]"),
        ('engine = "sglang"\nmodel = "m"\n[nccl]\npresett = "pcie"\n', 4, "nccl.presett"),
        ('engine = "sglang"\nmodel = "m"\n[env]\n"A B" = "1"\n', 4, "env.A B"),
    ],
)
def test_cli_check_names_file_line_key(tmp_path, text, line, key):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    r = run_cli("profiles", "check", str(f))
    assert r.returncode == 1
    assert f"{f}:{line}: {key}:" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("profiles", "check", str(f), "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out["ok"] is False
    assert (out["error"]["file"], out["error"]["line"], out["error"]["key"]) == (str(f), line, key)


def test_cli_check_ok_and_builder_errors(tmp_path):
    f = tmp_path / "ok.toml"
    f.write_text(GOOD)
    r = run_cli("profiles", "check", str(f))
    assert r.returncode == 0 and "ok" in r.stdout
    bad = tmp_path / "dangerous.toml"
    bad.write_text('engine = "vllm"\nmodel = "m"\n\n[env]\nLD_PRELOAD = "/tmp/x.so"\n')
    r = run_cli("profiles", "check", str(bad))
    assert r.returncode == 1 and f"{bad}:5: env.LD_PRELOAD:" in r.stderr
    r = run_cli("profiles", "check", str(bad), "--allow-dangerous-env")
    assert r.returncode == 0
    preset = tmp_path / "presets.toml"
    preset.write_text('schema_version = 1\n[nccl.x]\n[nccl.x.vars]\n"NO GOOD" = "1"\n')
    r = run_cli("profiles", "check", str(preset))
    assert r.returncode == 1 and f"{preset}:4: nccl.x.vars.NO GOOD:" in r.stderr


# ------------------------------------------------------------------------------ store


def test_discovery_order_and_shadowing(user_dir):
    assert user_root() == user_dir
    assert (builtin_root() / "servers" / "sglang-tuned.toml").is_file()
    store = ProfileStore()
    assert {"vllm-baseline", "sglang-base", "sglang-tuned", "sglang-eagle3"} <= set(store.names())
    assert all(p.source == "builtin" and p.read_only for p in store.listing().profiles)
    user_dir.mkdir()
    (user_dir / "sglang-base.toml").write_text('engine = "sglang"\nmodel = "/models/mine"\n')
    p = store.get("sglang-base")
    assert (p.source, p.model) == ("user", "/models/mine")
    assert [s.name for s in store.listing().shadowed] == ["sglang-base"]


def test_default_user_dir_is_config_dir(monkeypatch):
    monkeypatch.delenv("TUNEDECK_PROFILES", raising=False)
    assert user_root() == Path(os.environ["XDG_CONFIG_HOME"]) / "tunedeck" / "profiles"


def test_builtins_are_read_only(user_dir):
    store = ProfileStore()
    tuned = store.get("sglang-tuned")
    before = Path(tuned.path).read_bytes()
    with pytest.raises(ProfileError, match="read-only"):
        store.save(tuned)
    with pytest.raises(ProfileError, match="built-in profile name"):
        store.save(tuned, name="sglang-tuned")
    copy = store.save(tuned.with_(tp=4), name="my-tuned")
    assert copy.source == "user" and Path(copy.path) == user_dir / "my-tuned.toml" and copy.tp == 4
    shadow = store.save(tuned.with_(tp=2), name="sglang-tuned", shadow_builtin=True)
    assert shadow.source == "user" and store.get("sglang-tuned").tp == 2
    assert Path(tuned.path).read_bytes() == before


def test_atomic_save_and_reload(user_dir):
    store = ProfileStore()
    p = load_profile_text(GOOD, name="mine")
    saved = store.save(p)
    f = user_dir / "mine.toml"
    assert saved.path == str(f)
    again = store.get("mine")
    for attr in ("engine", "model", "tp", "port", "attention_backend", "nccl_preset", "nccl_overrides", "flags", "env"):
        assert getattr(again, attr) == getattr(p, attr), attr
    # saving again replaces it and keeps the previous version
    store.save(again.with_(port=30002))
    assert store.get("mine").port == 30002
    assert "port = 30001" in (user_dir / "mine.toml.bak").read_text()
    assert not list(user_dir.glob(".*.tmp"))
    # a different profile may not silently take the name
    with pytest.raises(ProfileError, match="already exists"):
        store.save(p.with_(source="", path=""), name="mine")


def test_saving_a_hand_edited_profile_keeps_its_comments_order_and_formatting(user_dir):
    """Only what changed is rewritten: the operator's notes, layout and key order survive a save."""
    user_dir.mkdir()
    f = user_dir / "notes.toml"
    hand = (
        "# DeepSeek on the 8×H200 box: keep tp at 8, the 4-GPU run OOMed on 2026-11-02\n"
        'engine = "sglang"\n'
        'model   = "deepseek-ai/DeepSeek-V3"   # the FP8 checkpoint\n'
        "port = 30001\n"
        "tp = 8\n"
        "\n"
        "[flags]\n"
        "# tried 2 and 8; 4 was best\n"
        "num-continuous-decode-steps = 4\n"
    )
    f.write_text(hand)
    store = ProfileStore()
    p = store.get("notes")
    store.save(p.with_(port=30002))
    text = f.read_text()
    assert text == hand.replace("port = 30001", "port = 30002")
    # a flag removed in the form goes, its neighbours' comments stay
    store.save(store.get("notes").with_(flags=()))
    text = f.read_text()
    assert "num-continuous-decode-steps" not in text
    assert text.startswith("# DeepSeek on the 8×H200 box") and "# the FP8 checkpoint" in text
    assert store.get("notes").port == 30002 and store.get("notes").flags == ()


def test_never_overwrites_a_file_that_does_not_parse(user_dir):
    user_dir.mkdir()
    f = user_dir / "hand.toml"
    f.write_text('engine = "sglang"\nmodel = "m"\ntp = [broken\n')
    store = ProfileStore()
    with pytest.raises(ProfileError, match="refusing to overwrite"):
        store.save(load_profile_text(GOOD, name="x"), name="hand", overwrite=True)
    assert f.read_text().endswith("tp = [broken\n")
    # and the broken file is reported, not fatal, when listing
    listing = store.listing()
    assert any(e.path == str(f) and e.line == 3 for e in listing.errors)
    assert "sglang-base" in {p.name for p in listing.profiles}


#: the PCIe NCCL preset's variables
PCIE_NCCL = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}


def test_presets():
    store = ProfileStore()
    names = [p.name for p in store.nccl_presets()]
    assert names[:4] == ["default", "pcie", "nvlink", "debug"]
    pcie = store.nccl_preset("pcie")
    assert dict(pcie.vars) == PCIE_NCCL
    assert "not for production" in pcie.warning
    assert dict(store.nccl_preset("debug").vars)["NCCL_DEBUG"] == "INFO"
    assert dict(store.nccl_preset("nvlink").vars)["NCCL_P2P_LEVEL"] == "NVL"
    assert store.nccl_preset("default").vars == ()
    sg = {p.name: p for p in store.attention_presets("sglang")}
    assert sg["flashinfer"].backend == "flashinfer"
    assert (sg["fa3-prefill-flashmla-decode"].prefill, sg["fa3-prefill-flashmla-decode"].decode) == ("fa3", "flashmla")
    assert {p.engine for p in store.attention_presets("vllm")} == {"vllm"}


# ------------------------------------------------------------------------------ builder


def test_builder_builtins():
    store = ProfileStore()
    cmds = {n: build_command(store.get(n), store=store) for n in store.names()}
    base = cmds["sglang-base"]
    assert base.argv == (
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path=deepseek-ai/DeepSeek-V2-Lite-Chat",
        "--tp-size=8",
        "--host=127.0.0.1",
        "--port=30000",
        "--enable-metrics",
    )
    assert base.env == (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),)
    tuned = cmds["sglang-tuned"]
    assert tuned.argv[3:] == (
        "--model-path=deepseek-ai/DeepSeek-V2-Lite-Chat",
        "--tp-size=8",
        "--host=127.0.0.1",
        "--port=30000",
        "--attention-backend=flashinfer",
        "--num-continuous-decode-steps=4",
        "--disable-custom-all-reduce",
        "--enable-metrics",
    )
    assert tuned.env_dict == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", **PCIE_NCCL}
    assert any("not for production" in w.message for w in tuned.warnings)
    assert tuned.display.startswith("env CUDA_DEVICE_ORDER=PCI_BUS_ID NCCL_PROTO=LL NCCL_ALGO=Ring ")
    eagle = cmds["sglang-eagle3"]
    assert "--speculative-algorithm=EAGLE3" in eagle.argv
    assert "--speculative-draft-model-path=jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B" in eagle.argv
    assert {"--speculative-num-steps=5", "--speculative-eagle-topk=8", "--speculative-num-draft-tokens=32"} <= set(
        eagle.argv
    )
    vllm = cmds["vllm-baseline"]
    assert vllm.argv == (
        "vllm",
        "serve",
        "deepseek-ai/DeepSeek-V2-Lite-Chat",
        "--tensor-parallel-size=8",
        "--host=127.0.0.1",
        "--port=8000",
    )


def test_demo_swaps_only_the_executable():
    store = ProfileStore()
    for name in store.names():
        real = build_command(store.get(name), store=store)
        demo = build_command(store.get(name), store=store, demo=True)
        assert demo.args == real.args and demo.env == real.env
        assert demo.executable[-2:] == ("sim", real.engine)
        assert demo.demo


def test_cli_command_demo_prints_nccl_and_flags():
    r = run_cli("profiles", "command", "sglang-tuned", "--demo")
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    for part in (
        "NCCL_PROTO=LL",
        "NCCL_ALGO=Ring",
        "NCCL_P2P_LEVEL=SYS",
        "NCCL_MAX_NCHANNELS=16",
        "NCCL_BUFFSIZE=16777216",
        "NCCL_NTHREADS=512",
        " sim sglang ",
        "--attention-backend=flashinfer",
        "--num-continuous-decode-steps=4",
        "--disable-custom-all-reduce",
        "--enable-metrics",
    ):
        assert part in line, part
    out = json.loads(run_cli("profiles", "command", "vllm-baseline", "--json").stdout)
    assert out["argv"][:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-V2-Lite-Chat"]
    r = run_cli("profiles", "command", "no-such-profile")
    assert r.returncode == 1 and "no profile named 'no-such-profile'" in r.stderr


def _p(**kw) -> ServerProfile:
    base = dict(name="t", engine="sglang", model="m")
    base.update(kw)
    return ServerProfile(**base)


def test_vllm_speculative_config_json():
    from tunedeck.profiles.model import Speculative

    cmd = build_command(_p(engine="vllm", speculative=Speculative("EAGLE3", "org/draft", num_steps=3)))
    tok = [a for a in cmd.argv if a.startswith("--speculative-config=")]
    assert len(tok) == 1
    assert json.loads(tok[0].split("=", 1)[1]) == {
        "method": "eagle3",
        "model": "org/draft",
        "num_speculative_tokens": 3,
    }


@pytest.mark.parametrize(
    "method, accepted",
    [
        ("deepseek_mtp", True),
        ("glm4_moe_mtp", True),
        ("qwen3_5_mtp", True),
        ("extract_hidden_states", True),
        ("medusa", False),
        ("mlp_speculator", False),
    ],
)
def test_vllm_speculative_methods_are_the_releases(method, accepted):
    """vLLM 0.33's ``SpeculativeMethod`` (its MTP model types included) decides, before launch and
    in the simulated engine alike: a method it has passes the check, one it dropped is refused."""
    from tunedeck.profiles.model import Speculative

    cmd, issues = check_profile(_p(engine="vllm", speculative=Speculative(method, num_steps=1)))
    errs = [i for i in issues if i.severity == "error"]
    if accepted:
        assert cmd is not None and not errs, issues
        (sc,) = [a for a in cmd.argv if a.startswith("--speculative-config=")]
        assert json.loads(sc.split("=", 1)[1])["method"] == method
        return
    assert (
        cmd is None and errs[0].key == "speculative.algorithm" and f"unknown vLLM method {method!r}" in errs[0].message
    )
    r = subprocess.run(
        [*tunedeck_cmd(), "sim", "vllm", "m", "-sc", json.dumps({"method": method, "num_speculative_tokens": 1})],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and f"invalid speculative method {method!r}" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "kw, key, words",
    [
        (dict(model="--evil"), "model", "starts with '-'"),
        (dict(model="../../etc"), "model", "'..'"),
        (dict(attention_backend="fa3 --x"), "attention.backend", "invalid backend"),
        (dict(flags=(("tp-size", 4),)), "flags.tp-size", "`tp` field"),
        (
            dict(flags=(("nonexistent-flag", True),)),
            "flags.nonexistent-flag",
            "--nonexistent-flag is not a flag in tunedeck's table of sglang 0.5.23",
        ),
        (dict(flags=(("page-size", "big"),)), "flags.page-size", "integer"),
        (dict(flags=(("served-model-name", "-x"),)), "flags.served-model-name", "starts with '-'"),
        (dict(flags=(("enable-metrics", 3),)), "flags.enable-metrics", "switch"),
        (dict(extra_args="--page-size"), "extra_args[--page-size]", "needs a value"),
        (dict(extra_args="--served-model-name -rf"), "extra_args[--served-model-name]", "starts with '-'"),
        (dict(extra_args="; rm -rf /"), "extra_args[;]", "not a --flag"),
        (dict(extra_args="--enable-metrics --enable-metrics"), "extra_args[--enable-metrics]", "twice"),
        (dict(extra_args="'unbalanced"), "extra_args", "cannot split"),
        (dict(env=(("PYTHONPATH", "/x"),)), "env.PYTHONPATH", "confirm"),
        (dict(env=(("X", "a\x00b"),)), "env.X", "control character"),
        (dict(engine="vllm", prefill_backend="fa3"), "attention.prefill", "only on SGLang"),
    ],
)
def test_builder_refuses_with_key(kw, key, words):
    cmd, issues = check_profile(_p(**kw))
    assert cmd is None
    errs = [i for i in issues if i.severity == "error"]
    assert errs and errs[0].key == key and words in errs[0].message, issues
    with pytest.raises(ProfileError):
        build_command(_p(**kw))


def test_extra_args_token_by_token():
    cmd = build_command(
        _p(extra_args="--page-size 64 --chunked-prefill-size=-1 --enable-torch-compile --tp 2".replace(" --tp 2", ""))
    )
    assert cmd.args[-3:] == ("--page-size=64", "--chunked-prefill-size=-1", "--enable-torch-compile")
    v = build_command(_p(engine="vllm", extra_args='--max-num-seqs 256 -cc \'{"cudagraph_mode": "FULL"}\''))
    assert v.args[-2:] == ("--max-num-seqs=256", '--compilation-config={"cudagraph_mode": "FULL"}')
    # short aliases are emitted as full names; a flag set by a field cannot come in twice
    cmd, issues = check_profile(_p(extra_args="--tp 2"))
    assert cmd is None and "`tp` field" in issues[0].message
    ok = build_command(_p(extra_args="--brand-new-flag=1", allow_unlisted_flags=True))
    assert ok.args[-1] == "--brand-new-flag=1" and any("unchecked" in w.message for w in ok.warnings)


def test_dangerous_env_needs_confirmation():
    p = _p(env=(("LD_LIBRARY_PATH", "/opt/cuda/lib64"),))
    with pytest.raises(ProfileError, match="confirm"):
        build_command(p)
    assert build_command(p, allow_dangerous=True).env_dict["LD_LIBRARY_PATH"] == "/opt/cuda/lib64"
    cmd = build_command(p.with_(confirm_dangerous=("LD_LIBRARY_PATH",)))
    assert any("confirmed" in w.message for w in cmd.warnings)


def test_nccl_overrides_and_env_merge(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(GOOD)
    cmd = build_command(load_profile_file(f))
    env = cmd.env_dict
    assert env["NCCL_BUFFSIZE"] == "8388608"  # override
    assert "NCCL_NTHREADS" not in env  # "" removes a preset variable
    assert env["NCCL_PROTO"] == "LL" and env["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0"
    assert next(iter(env)) == "CUDA_DEVICE_ORDER"


def test_diff_commands():
    store = ProfileStore()
    base = build_command(store.get("sglang-base"), store=store)
    tuned = build_command(store.get("sglang-tuned"), store=store)
    d = diff_commands(base, tuned)
    assert d.added == {
        "attention-backend": "flashinfer",
        "num-continuous-decode-steps": "4",
        "disable-custom-all-reduce": None,
    }
    assert not d.removed and not d.changed and not d.executable
    assert d.env_added["NCCL_PROTO"] == "LL" and len(d.env_added) == 6
    back = diff_commands(tuned, base)
    assert set(back.removed) == set(d.added) and set(back.env_removed) == set(d.env_added)
    t2 = build_command(store.get("sglang-tuned").with_(flags=(("num-continuous-decode-steps", 8),)), store=store)
    d2 = diff_commands(tuned, t2)
    assert d2.changed == {"num-continuous-decode-steps": ("4", "8")}
    assert set(d2.removed) == {"disable-custom-all-reduce", "enable-metrics"}
    assert "~ --num-continuous-decode-steps: 4 → 8" in d2.lines()
    assert diff_commands(tuned, tuned).empty


def test_secret_profiles_are_owner_only(user_dir):
    store = ProfileStore()
    p = store.save(load_profile_text('engine = "vllm"\nmodel = "m"\n[env]\nHF_TOKEN = "hf_x"\n', name="tok"))
    assert Path(p.path).stat().st_mode & 0o777 == 0o600
    q = store.save(load_profile_text(GOOD, name="plain"))
    assert Path(q.path).stat().st_mode & 0o777 == 0o644


def test_cli_list_and_show(user_dir):
    user_dir.mkdir()
    (user_dir / "broken.toml").write_text('engine = "sglang"\nmodel = "m"\nbogus = 1\n')
    (user_dir / "mine.toml").write_text(GOOD)
    r = run_cli("profiles", "list")
    assert r.returncode == 0
    assert "sglang-tuned" in r.stdout and "mine" in r.stdout
    assert f"{user_dir / 'broken.toml'}:3: bogus:" in r.stderr
    out = json.loads(run_cli("profiles", "list", "--json").stdout)
    names = {p["name"]: p for p in out["profiles"]}
    assert names["sglang-tuned"]["read_only"] and names["mine"]["source"] == "user"
    assert out["errors"][0]["key"] == "bogus" and out["user_folder"] == str(user_dir)
    r = run_cli("profiles", "show", "sglang-eagle3")
    assert r.returncode == 0 and 'algorithm = "EAGLE3"' in r.stdout and "read-only" in r.stdout
    shown = json.loads(run_cli("profiles", "show", "mine", "--json").stdout)
    assert shown["nccl"] == {"preset": "pcie", "overrides": {"NCCL_BUFFSIZE": "8388608", "NCCL_NTHREADS": ""}}
    r = run_cli("profiles", "show", "broken")
    assert r.returncode == 1 and "broken.toml:3: bogus: unknown key" in r.stderr


def test_profiles_core_never_loads_textual():
    code = (
        "import sys, importlib, pkgutil, tunedeck.profiles as p\n"
        "for m in pkgutil.iter_modules(p.__path__):\n"
        "    importlib.import_module('tunedeck.profiles.' + m.name)\n"
        "import tunedeck.commands.profiles, tunedeck.commands.preflight\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich') or m.startswith('tunedeck.widgets')]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr


def test_diff_against_a_recorded_command():
    from tunedeck.profiles.diff import command_from_argv

    store = ProfileStore()
    for name in ("sglang-tuned", "vllm-baseline"):
        cmd = build_command(store.get(name), store=store)
        rec = command_from_argv(cmd.engine, list(cmd.argv), cmd.env_dict)
        assert rec.prefix_len == cmd.prefix_len and diff_commands(rec, cmd).empty
    old = command_from_argv("vllm", ["vllm", "serve", "m", "--tensor-parallel-size=8", "--max-num-seqs=256"], {})
    new = build_command(store.get("vllm-baseline"), store=store)
    d = diff_commands(old, new)
    assert d.removed == {"max-num-seqs": "256"} and d.added == {"host": "127.0.0.1", "port": "8000"}
    assert d.positional == (("m",), ("deepseek-ai/DeepSeek-V2-Lite-Chat",))
    assert d.env_added == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_package_entry_points(tmp_path):
    from tunedeck.profiles import build_command as bc
    from tunedeck.profiles import load_profile

    cmd = bc(load_profile("sglang-tuned"), demo=True)
    assert cmd.argv[:3] == ("tunedeck", "sim", "sglang") and cmd.env_dict["NCCL_ALGO"] == "Ring"
    f = tmp_path / "x.toml"
    f.write_text(GOOD)
    assert load_profile(str(f)).name == "x"
    with pytest.raises(ProfileError, match="no profile named"):
        load_profile("nope")


def test_a_mistyped_profile_name_gets_a_did_you_mean(tmp_path, monkeypatch):
    from tunedeck.profiles.model import ProfileError
    from tunedeck.profiles.store import ProfileStore

    monkeypatch.setenv("TUNEDECK_PROFILES", str(tmp_path / "user"))
    store = ProfileStore()
    with pytest.raises(ProfileError) as info:
        store.get("sglang-bsae")
    assert "did you mean 'sglang-base'?" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ProfileError) as info:
        store.get("zzzzzz")
    assert "did you mean" not in str(info.value)
