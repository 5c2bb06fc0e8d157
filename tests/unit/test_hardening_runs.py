"""Runs at rest and in `tunedeck runs`: no secret in any stored file (issue item 9) and a run
launched without ``--wait`` is shown ready once it is (item 4)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.integration.test_launcher import fake
from tunedeck.hostops.launcher import launch, stop_run
from tunedeck.hostops.localhost import LocalHost
from tunedeck.hostops.runstore import RunStore
from tunedeck.util.safety import redact_argv


def _files_with(root: Path, needle: bytes) -> list[str]:
    hits = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            try:
                if needle in p.read_bytes():
                    hits.append(str(p))
            except OSError:
                pass
    return hits


def test_redact_argv_forms() -> None:
    argv = [
        "vllm",
        "serve",
        "m",
        "--api-key=a1",
        "--hf-token",
        "t1",
        "--my-secret=s",
        "--db-password",
        "p",
        "--tokenizer",
        "tok",
        "--max-num-seqs=8",
        "HF_TOKEN=x",
        "--api-key",  # vLLM's takes one or more keys: argparse gives it every word up to the next option
        "k1",
        "k2",
        "--port",
        "8000",
    ]
    red = redact_argv(argv)
    assert red == [
        "vllm",
        "serve",
        "m",
        "--api-key=<redacted>",
        "--hf-token",
        "<redacted>",
        "--my-secret=<redacted>",
        "--db-password",
        "<redacted>",
        "--tokenizer",
        "tok",
        "--max-num-seqs=8",
        "HF_TOKEN=<redacted>",
        "--api-key",
        "<redacted>",
        "<redacted>",
        "--port",
        "8000",
    ]


async def test_no_secret_in_any_stored_file_and_the_server_still_gets_them(tmp_path: Path) -> None:
    host = LocalHost()
    store = RunStore()
    secret_flag, secret_env = "sekrit-flag-4711", "sekrit-env-4712"
    want = hashlib.sha256(f"{secret_env} --api-key={secret_flag}".encode()).hexdigest()
    script = 'printf "%s %s" "$HF_TOKEN" "$1" | sha256sum; exec sleep 60'
    rec = await launch(
        host, ["sh", "-c", script, "sh", f"--api-key={secret_flag}"], {"HF_TOKEN": secret_env}, store=store
    )
    try:
        run_dir = Path(rec.run_dir or "")
        log = run_dir / "log"
        end = time.monotonic() + 20
        while want not in log.read_text() and time.monotonic() < end:
            time.sleep(0.05)
        assert want in log.read_text()  # the server saw both secrets
        assert not (run_dir / "cmd.env").exists()
        # one file holds a secret: the server's API key for the clients that benchmark it, owner-only
        assert _files_with(run_dir, b"sekrit") == [str(run_dir / "api_key")]
        assert (run_dir / "api_key").read_text() == f"{secret_flag}\n"
        assert (run_dir / "api_key").stat().st_mode & 0o777 == 0o600
        for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
            assert _files_with(Path(os.environ[var]), b"sekrit") == []
        stored = json.loads((run_dir / "argv.json").read_text())
        assert stored[-1] == "--api-key=<redacted>"
        assert store.load(rec.run_id).argv[-1] == "--api-key=<redacted>"  # type: ignore[union-attr]
        r = subprocess.run([*tunedeck_cmd(), "runs"], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert r.returncode == 0 and "sekrit" not in r.stdout + r.stderr
    finally:
        await stop_run(host, rec, grace=2, gpu_wait=0, store=store)


def test_runs_shows_ready_for_a_run_launched_without_wait() -> None:
    argv, port = fake("sglang", None, "--load-seconds", "0.5")
    r = subprocess.run(
        [*tunedeck_cmd(), "launch", "--json", "--cmd", *argv], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    try:
        status = ""
        end = time.monotonic() + 60
        while time.monotonic() < end:
            out = subprocess.run(
                [*tunedeck_cmd(), "runs", "--json"], cwd=REPO, capture_output=True, text=True, timeout=60
            )
            assert out.returncode == 0, out.stderr
            (rec,) = [x for x in json.loads(out.stdout) if x["port"] == port]
            status = rec["status"]
            if status == "ready":
                break
            assert status in ("launching", "starting"), status
            time.sleep(0.5)
        assert status == "ready"
    finally:
        subprocess.run(
            [*tunedeck_cmd(), "stop", "--yes", "--json", "--grace", "3"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )


def test_shown_commands_redact_secret_flags_and_env(tmp_path: Path) -> None:
    (tmp_path / "k.toml").write_text(
        'name = "k"\nengine = "vllm"\nmodel = "m"\ntp = 1\n'
        '[flags]\napi-key = "sekrit-9"\n[env]\nHF_TOKEN = "sekrit-8"\n'
    )
    env = dict(os.environ, TUNEDECK_PROFILES=str(tmp_path))
    for extra in ([], ["--json"]):
        r = subprocess.run(
            [*tunedeck_cmd(), "profiles", "command", "k", *extra], capture_output=True, text=True, env=env, timeout=60
        )
        assert r.returncode == 0, r.stderr
        assert "sekrit" not in r.stdout + r.stderr
        assert "--api-key=<redacted>" in r.stdout and "HF_TOKEN=<redacted>" in r.stdout


def test_a_record_id_of_the_wrong_form_loads_as_none_and_is_never_a_path(tmp_path):
    from tunedeck.hostops.runstore import RunStore
    from tunedeck.services.deploy.records import DeploymentStore
    from tunedeck.util.safety import UnsafeInput

    for store in (RunStore(tmp_path / "runs"), DeploymentStore(tmp_path / "deployments")):
        assert store.load("r1") is None and store.load("../../etc/passwd") is None
        with pytest.raises(UnsafeInput):
            store.path("../x")
