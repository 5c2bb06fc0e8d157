"""``tunedeck probe``: locally, over a real sshd, and the output parser."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.sshd import SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)
from tunedeck.commands.probe import format_table
from tunedeck.hostops.probe import parse_probe_output


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*tunedeck_cmd(), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


SMI_L = (
    "GPU 0: NVIDIA H200 (UUID: GPU-4d3f1a2b-0000-0000-0000-000000000000)\n"
    "GPU 1: NVIDIA H200 (UUID: GPU-4d3f1a2b-0000-0000-0000-000000000001)\n"
)


def test_parse_probe_output() -> None:
    text = (
        "hostname=gpu-box\nos=Ubuntu 22.04.4 LTS\nkernel=5.15.0\narch=x86_64\ncpus=224\n"
        "mem_kb=2113929216\npython_path=/usr/bin/python3\npython_version=3.10.12\n"
        "engine_sglang=\nengine_vllm=0.6.3\nnvidia_smi_path=/usr/bin/nvidia-smi\nnvidia_smi_rc=0\n"
        "gpu=NVIDIA H200\ngpu=NVIDIA H200\nnoise without equals\n"
    )
    r = parse_probe_output("gpu-box", text)
    d = r.as_dict()
    assert d["cpus"] == 224 and d["memory_bytes"] == 2113929216 * 1024
    assert d["nvidia_smi"] == {
        "present": True,
        "path": "/usr/bin/nvidia-smi",
        "gpu_count": 2,
        "gpus": ["NVIDIA H200", "NVIDIA H200"],
        "error": None,
    }
    assert d["engines"] == {
        "sglang": {"installed": False, "version": None},
        "vllm": {"installed": True, "version": "0.6.3"},
    }
    table = format_table(r)
    assert "nvidia-smi  /usr/bin/nvidia-smi, 2 GPUs (NVIDIA H200)" in table
    assert re.search(r"(?m)^sglang +not installed$", table), table
    # a failing nvidia-smi gives no GPU count (N/A), not 0
    r = parse_probe_output(
        "x", "nvidia_smi_path=/usr/bin/nvidia-smi\nnvidia_smi_rc=9\nnvidia_smi_error=NVIDIA-SMI has failed\n"
    )
    assert r.gpu_count is None and r.nvidia_smi_error == "NVIDIA-SMI has failed"
    assert "error: NVIDIA-SMI has failed" in format_table(r)


def test_what_the_host_says_cannot_drive_the_terminal_in_the_probe_table() -> None:
    """A hostname, a path or the runtime's Python (the path it names itself) with escapes in it is
    shown with the escapes written out, never sent to the terminal."""
    r = parse_probe_output("t", "hostname=evil\x1b]0;pwned\x07\npython_path=/usr/bin/py\x1b[2J\npython_version=3.11\n")
    table = format_table(r, {"python": "/x/\x1b]0;t\x07py", "python_version": "3.11", "shipped": True})
    assert "\x1b" not in table and "\x07" not in table, repr(table)
    assert "evil\\x1b]0;pwned\\x07" in table and "/x/\\x1b]0;t\\x07py" in table


def test_probe_local_json_and_table(tmp_path: Path) -> None:
    pkgs = tmp_path / "pkgs"
    (pkgs / "sglang").mkdir(parents=True)
    (pkgs / "sglang" / "__init__.py").write_text("__version__ = '0.4.1.post7'\n")
    dist = pkgs / "vllm-0.6.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.6.3\n")
    env = dict(os.environ, PYTHONPATH=f"{REPO}:{pkgs}")
    r = _run("probe", "--json", env=env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["target"] == "local"
    assert d["hostname"] == socket.gethostname()
    assert d["cpus"] == os.cpu_count()
    assert d["memory_bytes"] > 2**28
    assert d["python"]["version"].count(".") == 2
    assert d["engines"]["sglang"] == {"installed": True, "version": "0.4.1.post7"}
    assert d["engines"]["vllm"] == {"installed": True, "version": "0.6.3"}
    r = _run("probe", "local")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    col = lines[0].index("local")
    assert all(len(ln) > col and ln[col - 2 : col] == "  " and ln[col] != " " for ln in lines)
    assert [ln.split()[0] for ln in lines] == [
        "target",
        "hostname",
        "os",
        "kernel",
        "cpus",
        "memory",
        "python3",
        "nvidia-smi",
        "sglang",
        "vllm",
        "runtime",
    ]


def test_probe_bad_target_is_a_clean_error() -> None:
    r = _run("probe", "bad host;rm")
    assert r.returncode == 2
    assert "invalid host name" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.sshd
@pytest.mark.timeout(60)
def test_probe_over_sshd(sshd: SshdServer) -> None:
    shim = sshd.shim_dir / "nvidia-smi"
    shim.write_text("#!/bin/sh\n[ \"$1\" = -L ] || exit 2\ncat <<'EOF'\n" + SMI_L + "EOF\n")
    shim.chmod(0o755)
    try:
        r = _run("probe", sshd.target(), "--json", env=sshd.client_env())
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        assert d["target"] == sshd.target()
        assert d["hostname"] == socket.gethostname()
        assert d["cpus"] == os.cpu_count()
        assert d["python"]["path"] == "/usr/bin/python3"
        assert d["nvidia_smi"]["path"] == str(shim)
        assert d["nvidia_smi"]["gpu_count"] == 2 and d["nvidia_smi"]["gpus"] == ["NVIDIA H200"] * 2
        assert d["engines"]["vllm"] == {"installed": False, "version": None}
        # --host works as the default target; the table is printed without --json
        r = _run("probe", "--host", sshd.target(), env=sshd.client_env())
        assert r.returncode == 0, r.stderr
        assert "2 GPUs (NVIDIA H200)" in r.stdout and re.search(r"(?m)^vllm +not installed$", r.stdout)
        assert re.search(r"(?m)^runtime +Python 3\.\d+", r.stdout), r.stdout
    finally:
        shim.unlink()


@pytest.mark.sshd
@pytest.mark.timeout(60)
def test_probe_refuses_unknown_and_changed_keys(sshd: SshdServer) -> None:
    sshd.write_known_hosts("empty")
    r = _run("probe", sshd.target(), "--json", env=sshd.client_env())
    assert r.returncode != 0
    assert "SHA256:" in r.stderr and sshd.host_key_fingerprint in r.stderr
    assert f"tunedeck trust {sshd.target()}" in r.stderr
    assert json.loads(r.stdout)["error"]["kind"] == "hostkey-unknown"
    assert sshd.known_hosts_path.read_text() == ""
    sshd.write_known_hosts("wrong")
    r = _run("probe", sshd.target(), env=sshd.client_env())
    assert r.returncode != 0
    assert "MISMATCH" in r.stderr and sshd.host_key_fingerprint in r.stderr
    assert "Traceback" not in r.stderr
