"""A read-only ``${TUNEDECK_HOME}`` on the host: a launch and a host-side benchmark each stop with
one line naming the path and the cause, and leave nothing behind. The folder is made read-only
in a mount namespace of the test's own (root: a bind mount remounted read-only)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(120)


def in_readonly_home(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    ro = home.parent
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99\nshift; exec "$@"\n'
    env = {**os.environ, "TUNEDECK_HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(ro), sys.executable, "-m", "tunedeck", *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=90,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args,where",
    [
        (("launch", "--demo", "--engine", "other", "--port", "5999", "--cmd", "sleep", "60"), "runs"),
        (("bench", "--demo", "--port", "5999", "--num-prompts", "2"), "lib"),
    ],
)
def test_a_read_only_home_is_one_line_naming_the_path_and_nothing_is_left(tmp_path: Path, args, where) -> None:
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"]).returncode != 0:
        msg = "no mount namespaces here (unshare -m needs root)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    ro = tmp_path / "ro"
    home = ro / "td"
    home.mkdir(parents=True)
    r = in_readonly_home(home, *args)
    assert r.returncode not in (0, 99), r.stderr
    err = r.stderr.strip()
    assert err.count("\n") == 0, err
    assert f"{home}/{where}" in err and "Read-only file system" in err, err
    assert "Traceback" not in err
    assert list(home.rglob("*")) == []  # nothing created, no temporary file left
