"""A server's API key: written at launch to a 0600 file of the run's folder (from the launch
script's body, never argv), read from there by the clients that benchmark the run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tunedeck.bench.config import BenchConfig, auth_headers
from tunedeck.hostops.launcher import launch_script
from tunedeck.util.safety import UnsafeInput, flag_value


def test_flag_value_takes_both_forms_and_the_last() -> None:
    assert flag_value(["sglang", "--api-key", "k1"], "--api-key") == "k1"
    assert flag_value(["vllm", "--api-key=k2", "--api-key", "k3"], "--api-key") == "k3"
    assert flag_value(["vllm", "--api-key-file", "x"], "--api-key") is None


def test_launch_script_writes_the_key_file_and_marks_the_run() -> None:
    script, args = launch_script("runs", "abcdef012345", ["vllm", "serve", "m", "--api-key", "sk-1"], {}, {"port": 8})
    assert "put api_key <<'" in script and "\nsk-1\n" in script
    assert "sk-1" not in " ".join(args)  # the script goes to the shell's stdin; its arguments carry no key
    meta = json.loads(script.split("put meta.json <<'")[1].split("\n")[1])
    assert meta == {"port": 8, "api_key": True}
    argv_json = script.split("put argv.json <<'")[1].split("\n")[1]
    assert "sk-1" not in argv_json
    plain, _ = launch_script("runs", "abcdef012345", ["vllm", "serve", "m"], {}, {"port": 8})
    assert "api_key" not in plain
    with pytest.raises(UnsafeInput, match="--api-key"):
        launch_script("runs", "abcdef012345", ["vllm", "--api-key=a b"], {}, {})


def test_a_key_given_only_in_the_environment_gets_its_key_file_too(tmp_path: Path) -> None:
    rid = "abcdef012345"
    env = {"VLLM_API_KEY": "sk-env-3"}
    script, args = launch_script("runs", rid, ["sh", "-c", "exit 0"], env, {"port": 8})
    assert "sk-env-3" not in " ".join(args)
    r = subprocess.run(
        ["sh", "-s", "--", *args], input=script, capture_output=True, text=True, timeout=30,
        env=dict(os.environ, TUNEDECK_HOME=str(tmp_path)),
    )  # fmt: skip
    assert "PID " in r.stdout, r.stdout + r.stderr
    run = tmp_path / "runs" / rid
    assert (run / "api_key").read_text() == "sk-env-3\n"
    assert (run / "api_key").stat().st_mode & 0o777 == 0o600
    assert json.loads((run / "meta.json").read_text())["api_key"] is True
    assert "sk-env-3" not in (run / "env.json").read_text()  # redacted where it is recorded
    with pytest.raises(UnsafeInput, match="VLLM_API_KEY"):
        launch_script("runs", rid, ["vllm"], {"VLLM_API_KEY": "a b"}, {})


def test_auth_headers_from_the_file(tmp_path: Path) -> None:
    key = tmp_path / "api_key"
    key.write_text("sk-2\n")
    assert BenchConfig(url="http://127.0.0.1:1", api_key_file=str(key)).auth_headers() == {
        "Authorization": "Bearer sk-2"
    }
    assert auth_headers(None) == {}
    with pytest.raises(ValueError, match=r"API key file .*missing.*No such file"):
        auth_headers(str(tmp_path / "missing"))
    key.write_text("two words\n")
    with pytest.raises(ValueError, match="not one key on one line"):
        auth_headers(str(key))
