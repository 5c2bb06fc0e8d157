"""Several hosts on the command line: ``[groups]`` of the config file, ``--host @GROUP``, and
``tunedeck status --host A --host B [--json]`` (``{"hosts": [...]}``, exit 3 when one did not answer)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.fake_smi import FakeSmi
from tests.simfix import free_port
from tunedeck.collectors.fleet import GroupError, expand_targets, load_groups

pytestmark = pytest.mark.timeout(60)


def _config(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch | None = None) -> Path:
    p = tmp_path / "config.toml"
    p.write_text(text)
    if monkeypatch is not None:
        monkeypatch.setenv("TUNEDECK_CONFIG", str(p))
    return p


def _run(args: list[str], fake: FakeSmi | None, **env: str) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ, PYTHONPATH=str(REPO), **env)
    if fake is not None:
        e["PATH"] = fake.path_env()
    return subprocess.run([*tunedeck_cmd(), *args], cwd=REPO, env=e, capture_output=True, text=True, timeout=50)


def test_groups_expand_in_order_each_target_once(tmp_path, monkeypatch):
    _config(
        tmp_path,
        '[keymap]\nmode-launch = "f2"\n\n[groups]\nlab = ["gpu-a", "gpuop@gpu-b:2222"]\n'
        'all = ["gpu-b", "gpu-a", "gpu-c"]\n',
        monkeypatch,
    )
    assert load_groups() == {"lab": ("gpu-a", "gpuop@gpu-b:2222"), "all": ("gpu-b", "gpu-a", "gpu-c")}
    assert expand_targets(["@lab"]) == ["gpu-a", "gpuop@gpu-b:2222"]
    assert expand_targets(["local", "@all", "@lab", "gpu-a"]) == [
        "local",
        "gpu-b",
        "gpu-a",
        "gpu-c",
        "gpuop@gpu-b:2222",
    ]


@pytest.mark.parametrize(
    "text,words",
    [
        ('[groups]\nlab = "gpu-a"\n', "groups.lab: expected a list"),
        ("[groups]\nlab = []\n", "groups.lab: expected a list"),
        ('[groups]\nlab = ["-oProxyCommand=x"]\n', "groups.lab: target"),
        ('[groups]\n"l b" = ["gpu-a"]\n', "not a group name"),
        ("groups = 3\n", "[groups] must be a table"),
        ("[groups\n", "config.toml"),
    ],
)
def test_a_bad_groups_table_names_the_file_and_key(tmp_path, text, words):
    p = _config(tmp_path, text)
    with pytest.raises(GroupError) as e:
        load_groups(p)
    assert str(p) in str(e.value) and words in str(e.value)


def test_an_unknown_group_names_the_known_ones(tmp_path, monkeypatch):
    _config(tmp_path, '[groups]\nlab = ["gpu-a"]\n', monkeypatch)
    with pytest.raises(GroupError, match=r"no group 'lob' in .*config.toml.*known: lab"):
        expand_targets(["@lob"])


def test_status_with_two_hosts_prints_hosts_and_a_failed_host_with_its_error(tmp_path):
    fake = FakeSmi(tmp_path, gpus=4)
    closed = f"127.0.0.1:{free_port()}"
    r = _run(["status", "--host", "local", "--host", closed, "--json"], fake)
    assert r.returncode == 3, r.stderr
    data = json.loads(r.stdout)
    assert list(data) == ["hosts"]
    ok, failed = data["hosts"]
    assert ok["target"] == "local" and ok["gpu_state"] == "ok" and len(ok["gpus"]) == 4
    assert {"target", "gpu_state", "gpu_message", "gpus", "processes", "host", "host_error", "servers"} <= set(ok)
    assert failed == {"target": closed, "error": {"kind": "unreachable", "message": failed["error"]["message"]}}
    assert "refused" in failed["error"]["message"]
    human = _run(["status", "--host", "local", "--host", closed], fake)
    assert human.returncode == 3 and "Traceback" not in human.stderr
    lines = human.stdout.splitlines()
    assert lines[0] == "Hosts: 2 (1 answered)"
    row = next(ln for ln in lines if ln.strip().startswith("local "))
    assert row.split()[1:3] == ["ok", "4"]
    assert any(ln.strip().startswith(closed) and " failed " in ln and "unreachable:" in ln for ln in lines)


def test_status_of_a_group_where_every_host_answers_exits_0(tmp_path):
    fake = FakeSmi(tmp_path, gpus=2)
    cfg = _config(tmp_path, '[groups]\nhere = ["local"]\n')
    r = _run(["status", "--host", "@here", "--json"], fake, TUNEDECK_CONFIG=str(cfg))
    assert r.returncode == 0, r.stderr
    assert [h["target"] for h in json.loads(r.stdout)["hosts"]] == ["local"]  # a group: always the fleet form
    fake.set_mode("exit9")
    r = _run(["status", "--host", "@here", "--json"], fake, TUNEDECK_CONFIG=str(cfg))
    assert r.returncode == 1  # every host answered, part of one failed
    assert json.loads(r.stdout)["hosts"][0]["gpu_state"] == "driver-not-loaded"


def test_a_single_host_keeps_its_usual_object(tmp_path):
    fake = FakeSmi(tmp_path, gpus=2)
    data = json.loads(_run(["status", "--host", "local", "--json"], fake).stdout)
    assert "hosts" not in data and data["target"] == "local"


@pytest.mark.parametrize(
    "args,words",
    [
        (["status", "--host", "@nope"], "no group 'nope'"),
        (["status", "--host", "local", "--host", "a b"], "--host"),
        (["runs", "--host", "a", "--host", "b"], "one --host only"),
        (["stop", "--host", "@lab"], "one --host only"),
    ],
)
def test_bad_fleet_input_is_one_line_and_exit_2(args, words, tmp_path):
    r = _run(args, None, TUNEDECK_CONFIG=str(_config(tmp_path, "")))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and words in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_fleet_dashboard_without_a_terminal_points_at_status(tmp_path):
    r = _run(["--host", "local", "--host", "127.0.0.1:1"], None)
    assert r.returncode == 2 and "status --host" in r.stderr and len(r.stderr.strip().splitlines()) == 1
