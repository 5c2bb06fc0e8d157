"""The config file, read once: its groups and keymap, each refused on its own with a line naming
the file and the key, and a warning (stderr, log) per table or key tunedeck does not know."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tunedeck import cli, config
from tunedeck.collectors.fleet import GroupError, load_groups
from tunedeck.config import Config, load_config, read_config
from tunedeck.ui.keymap import KeymapError, load_keymap


def _config(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch | None = None) -> Path:
    p = tmp_path / "config.toml"
    p.write_text(text)
    if monkeypatch is not None:
        monkeypatch.setenv("TUNEDECK_CONFIG", str(p))
    return p


def test_no_file_is_an_empty_config(tmp_path):
    assert read_config(None) == Config()
    assert read_config(tmp_path / "none.toml") == Config()
    assert load_config() == Config()  # the fixtures' XDG dirs hold none


def test_groups_and_keymap_are_read(tmp_path):
    p = _config(tmp_path, '[groups]\nlab = ["gpu-a", "gpuop@gpu-b:2222"]\n\n[keymap]\nmode-launch = "f2, ctrl+l"\n')
    cfg = read_config(p)
    assert cfg.path == p and cfg.warnings == ()
    assert dict(cfg.groups) == {"lab": ("gpu-a", "gpuop@gpu-b:2222")}
    assert dict(cfg.keymap) == {"mode-launch": "f2,ctrl+l"}
    assert cfg.groups_error is None and cfg.keymap_error is None


def test_an_unknown_table_or_key_is_a_warning_naming_the_file_and_the_known_ones(tmp_path, caplog):
    p = _config(tmp_path, 'colour = "red"\n"a\\u001bb" = 1\n[group]\nlab = ["gpu-a"]\n[keymap]\nmode-launch = "f2"\n')
    with caplog.at_level(logging.WARNING, logger="tunedeck.config"):
        cfg = read_config(p)
    assert cfg.warnings == (
        f"{p}: unknown key 'colour' (known: groups, keymap)",
        f"{p}: unknown key 'a\\x1bb' (known: groups, keymap)",
        f"{p}: unknown table [group] (known: groups, keymap)",
    )
    assert dict(cfg.keymap) == {"mode-launch": "f2"}  # the known tables still count
    assert [r.getMessage() for r in caplog.records] == list(cfg.warnings)


def test_broken_toml_refuses_both_tables_with_the_file_and_the_line(tmp_path, caplog):
    p = _config(tmp_path, '[groups]\nlab = ["gpu-a"\n[keymap]\nmode-launch = "f2"\n')
    with caplog.at_level(logging.WARNING, logger="tunedeck.config"):
        cfg = read_config(p)
    assert cfg.groups_error == cfg.keymap_error
    assert cfg.groups_error is not None and cfg.groups_error.startswith(f"{p}: ") and "line 3" in cfg.groups_error
    assert "\n" not in cfg.groups_error
    assert any(str(p) in r.getMessage() for r in caplog.records)
    with pytest.raises(GroupError, match="line 3"):
        load_groups(p)
    with pytest.raises(KeymapError, match="line 3"):
        load_keymap(p)


def test_an_unreadable_file_says_so(tmp_path):
    p = tmp_path / "config.toml"
    p.write_bytes(b"[keymap]\nmode-launch = '\xff'\n")
    with pytest.raises(KeymapError, match=f"{p}: cannot read"):
        load_keymap(p)


@pytest.mark.parametrize(
    ("text", "refused", "words"),
    [
        ("groups = 3\n", "groups", "[groups] must be a table"),
        ('[groups]\nlab = "gpu-a"\n', "groups", "groups.lab: expected a list"),
        ("[groups]\nlab = [1]\n", "groups", "groups.lab: expected a list"),
        ("keymap = [1]\n", "keymap", "[keymap] must be a table"),
        ("[keymap]\nmode-launch = 3\n", "keymap", "keymap.mode-launch: expected keys"),
        ('[keymap]\nMode = "f2"\n', "keymap", "keymap.Mode: not a binding id"),
    ],
)
def test_a_table_of_the_wrong_type_is_refused_alone(tmp_path, text, refused, words):
    other = '[keymap]\nmode-launch = "f2"\n' if refused == "groups" else '[groups]\nlab = ["gpu-a"]\n'
    p = _config(tmp_path, text + other)
    cfg = read_config(p)
    err = cfg.groups_error if refused == "groups" else cfg.keymap_error
    assert err is not None and err.startswith(f"{p}: ") and words in err
    if refused == "groups":
        assert cfg.keymap_error is None and dict(cfg.keymap) == {"mode-launch": "f2"}
        with pytest.raises(GroupError, match="groups"):
            load_groups(p)
    else:
        assert cfg.groups_error is None and dict(cfg.groups) == {"lab": ("gpu-a",)}
        with pytest.raises(KeymapError, match="keymap"):
            load_keymap(p)


def test_the_file_is_read_once_and_again_when_it_changes(tmp_path, monkeypatch):
    p = _config(tmp_path, '[keymap]\nmode-launch = "f2"\n', monkeypatch)
    reads: list[Path | None] = []
    real = config.read_config

    def counting(path: Path | None) -> Config:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(config, "read_config", counting)
    first = load_config()
    assert load_config() is first and load_groups() == {} and load_keymap() == {"mode-launch": "f2"}
    assert reads == [p]
    p.write_text('[keymap]\nmode-launch = "f3,f4"\n')
    assert dict(load_config().keymap) == {"mode-launch": "f3,f4"}
    assert reads == [p, p]


def test_the_command_line_prints_each_warning_on_stderr(tmp_path, monkeypatch, capsys):
    p = _config(tmp_path, '[groups]\nlab = ["gpu-a"]\n[grups]\nlob = ["gpu-b"]\n', monkeypatch)
    assert cli.main(["status", "--host", "@lob"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"tunedeck: warning: {p}: unknown table [grups] (known: groups, keymap)",
        f"tunedeck status: --host: no group 'lob' in {p} ([groups]; known: lab)",
    ]


def test_the_fleet_dashboard_that_cannot_open_prints_them_too(tmp_path, monkeypatch, capsys):
    p = _config(tmp_path, '[grups]\nlab = ["gpu-a"]\n', monkeypatch)
    assert cli.main(["--host", "@lab"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"tunedeck: warning: {p}: unknown table [grups] (known: groups, keymap)",
        f"tunedeck: --host: no group 'lab' in {p} ([groups]; known: none)",
    ]


def test_the_command_line_is_quiet_about_a_config_it_knows(tmp_path, monkeypatch, capsys):
    _config(tmp_path, '[groups]\nlab = ["gpu-a"]\n', monkeypatch)
    assert cli.main(["status", "--host", "@lob"]) == 2
    assert "warning" not in capsys.readouterr().err


def test_the_simulator_reads_no_config(tmp_path):
    """``tunedeck sim smi`` stands in for nvidia-smi (a probe starts it every few seconds): it
    neither warns about the laptop's config nor imports its reader."""
    import os
    import subprocess
    import sys

    p = _config(tmp_path, '[grups]\nlab = ["gpu-a"]\n')
    code = (
        "import sys; from tunedeck import cli; rc = cli.main(['sim', 'smi', '--query-gpu=index,memory.used', "
        "'--format=csv,noheader,nounits']); print('config' if 'tunedeck.config' in sys.modules else 'none', "
        "file=sys.stderr); sys.exit(rc)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TUNEDECK_CONFIG": str(p)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == "none"
    assert r.stdout.strip()  # the simulated GPUs' rows
