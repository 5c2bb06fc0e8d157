"""Hostile input at the terminal: escaped errors, broken files, closed pipes.

Issue items 7 (terminal injection in errors), 8 (malformed TOML crashes) and 11 (BrokenPipe
tracebacks). Fast; no SSH.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import tunedeck_cmd
from tunedeck.util.safety import visible

HOSTILE_KEY = "\x1b]0;PWNED\x07\x1b[2J"
#: Anything a terminal acts on; what must never reach it raw.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _toml_key(k: str) -> str:
    out = []
    for c in k:
        if c in '"\\' or ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _profile(folder: Path, name: str, extra: str) -> Path:
    p = folder / f"{name}.toml"
    p.write_text(f'name = "{name}"\nengine = "vllm"\nmodel = "m"\ntp = 1\n{extra}\n', encoding="utf-8")
    return p


def _cli(args: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TUNEDECK_PROFILES=str(folder))
    return subprocess.run([*tunedeck_cmd(), *args], capture_output=True, text=True, env=env, timeout=120)


def test_visible_escapes_what_a_terminal_acts_on() -> None:
    assert visible(HOSTILE_KEY) == "\\x1b]0;PWNED\\x07\\x1b[2J"
    assert visible("a\nb\r\tc") == "a\\nb\\r\\tc"
    assert visible("\x9b2J \u202e ok é 日本") == "\\x9b2J \\u202e ok é 日本"
    assert not RAW_CONTROL.search(visible("".join(map(chr, range(0x00, 0xA0)))))


def test_hostile_key_names_are_escaped_on_one_line(tmp_path: Path) -> None:
    _profile(tmp_path, "evil", f"[flags]\n{_toml_key(HOSTILE_KEY)} = 1\n")
    _profile(tmp_path, "nl", f'[env]\n{_toml_key("A" + chr(10) + "B")} = "x"\n')
    for args in (["profiles", "list"], ["profiles", "show", "evil"], ["profiles", "show", "nl"]):
        r = _cli(args, tmp_path)
        assert "Traceback" not in r.stderr, r.stderr
        assert not RAW_CONTROL.search(r.stdout + r.stderr), (args, r.stderr)
        errors = [line for line in r.stderr.splitlines() if line.strip()]
        if args[-1] != "list":
            assert r.returncode != 0
            assert len(errors) == 1, (args, r.stderr)  # one line per bad input
        assert "\\x1b]0;PWNED\\x07" in r.stderr or "A\\nB" in r.stderr, r.stderr


def test_deeply_nested_toml_is_a_broken_file_with_its_line(tmp_path: Path) -> None:
    _profile(tmp_path, "deep", "x = " + "[" * 500 + "]" * 500)
    _profile(tmp_path, "deeper", "[flags]\ny = " + "{a = " * 2000 + "1" + "}" * 2000)
    r = _cli(["profiles", "list"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr, r.stderr
    assert re.search(r"deep\.toml:5: .*nested deeper than", r.stderr), r.stderr
    assert re.search(r"deeper\.toml:6: .*nested deeper than", r.stderr), r.stderr
    assert "vllm-baseline" in r.stdout  # the other profiles still listed
    r = _cli(["profiles", "show", "deep"], tmp_path)
    assert r.returncode != 0 and "Traceback" not in r.stderr and "deep.toml:5" in r.stderr


def test_listing_survives_any_loader_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tunedeck.profiles import store as store_mod

    _profile(tmp_path, "ok", "")
    _profile(tmp_path, "boom", "")
    real = store_mod.load_profile_file

    def flaky(path: Path, *, source: str = "user"):  # type: ignore[no-untyped-def]
        if Path(path).stem == "boom":
            raise RecursionError("maximum recursion depth exceeded")
        return real(path, source=source)

    monkeypatch.setattr(store_mod, "load_profile_file", flaky)
    listing = store_mod.ProfileStore(user=tmp_path).listing()
    assert "ok" in [p.name for p in listing.profiles]
    (err,) = [e for e in listing.errors if e.path and e.path.endswith("boom.toml")]
    assert "RecursionError" in str(err)


@pytest.mark.parametrize(
    "args",
    [
        ["probe", "--demo"],
        ["runs", "--demo"],
        ["status", "--json", "--demo"],
        ["journal", "--json"],
        ["results", "list"],
    ],
)
def test_closed_pipe_is_quiet(args: list[str]) -> None:
    """``tunedeck … | head``: the reader is gone before we write; no traceback, exit 141."""
    r_fd, w_fd = os.pipe()
    os.close(r_fd)
    try:
        p = subprocess.run([*tunedeck_cmd(), *args], stdout=w_fd, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w_fd)
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr
    assert p.returncode == 141, (p.returncode, p.stderr)


async def test_broken_files_in_the_profiles_folder_never_take_down_the_launch_screen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pressing `l` with a 500-deep array and a hostile key in the profiles folder: the
    profile list opens with the built-ins, the broken files are named, the app keeps running."""
    from tests.ui.test_ui_status import SIZE, app_with, until
    from tunedeck.ui.screens.profiles import ProfilesScreen

    folder = tmp_path / "profiles"
    folder.mkdir()
    _profile(folder, "deep", "x = " + "[" * 500 + "]" * 500)
    _profile(folder, "evil", f"[flags]\n{_toml_key(HOSTILE_KEY)} = 1\n")
    monkeypatch.setenv("TUNEDECK_PROFILES", str(folder))
    app = app_with(demo=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, ProfilesScreen), timeout=10)
        await pilot.pause(0.3)
        assert app.is_running and isinstance(app.screen, ProfilesScreen)
        assert "vllm-baseline" in app.screen.profiles
        assert not RAW_CONTROL.search(str(app.sub_title) + str(app.title))


def test_host_errors_quote_the_host_on_one_escaped_line() -> None:
    from tunedeck.hostops.hosts import HostError

    e = HostError("error", f"tail: {HOSTILE_KEY}\nsecond line", target="gpu1")
    assert str(e) == "gpu1: tail: \\x1b]0;PWNED\\x07\\x1b[2J\\nsecond line"
    assert not RAW_CONTROL.search(str(e) + e.message)
