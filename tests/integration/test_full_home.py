"""A full ``${TUNEDECK_HOME}`` on the host, and one that is a regular file: a launch and a
host-side benchmark each stop with one line naming the path and the cause, and leave no
temporary file and no run or job folder behind. The full disk is a small tmpfs mounted in a mount
namespace of the test's own (root), filled to leave ``free`` pages, so each write of the launch
and of the runtime's upload is reached in turn. Over SSH the tmpfs is mounted in the sshd's own
mount namespace (its sessions see it), under a server with SFTP (whose full disk reads only
"Failure") and one that takes files over ``cat``."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import REPO
from tests.sshd import TEST_USER, SshdServer, _serve, _use
from tunedeck.hostops.hosts import Host
from tunedeck.services import runtime
from tunedeck.util.files import os_error_text

pytestmark = pytest.mark.timeout(180)

PAGE = 4096
PAGES = 128  # the tmpfs: 512 KiB

LAUNCH = ("launch", "--demo", "--engine", "other", "--port", "5999", "--cmd", "sleep", "60")
BENCH = ("bench", "--demo", "--port", "5999", "--num-prompts", "2")

#: fill the tmpfs at $1 to leave $2 pages, run the rest, then list what is left under $1/td
_FULL = r"""mount -t tmpfs -o size=$((PAGES * 4096)) tmpfs "$1" || exit 99
mkdir "$1/td" && head -c $(((PAGES - $2) * 4096)) /dev/zero > "$1/fill" || exit 98
mp=$1; shift 2
"$@"; echo "RC $?"
find "$mp/td" -mindepth 1 | sed 's/^/LEFT /'
"""


def _need_mounts() -> None:
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"]).returncode != 0:
        msg = "no mount namespaces here (unshare -m needs root)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


def in_full_home(tmp_path: Path, free: int, *args: str) -> tuple[int, str, list[str]]:
    """(exit status, stderr, what is left in the home) of ``tunedeck ARGS`` with ``free`` pages."""
    mp = tmp_path / "m"
    mp.mkdir()
    env = {**os.environ, "TUNEDECK_HOME": str(mp / "td"), "PYTHONPATH": str(REPO), "PAGES": str(PAGES)}
    r = subprocess.run(
        ["unshare", "-m", "sh", "-c", _FULL, "sh", str(mp), str(free), sys.executable, "-m", "tunedeck", *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=150,
    )  # fmt: skip
    assert r.returncode not in (98, 99), r.stderr
    rc = [int(line[3:]) for line in r.stdout.splitlines() if line.startswith("RC ")]
    left = [line[5:] for line in r.stdout.splitlines() if line.startswith("LEFT ")]
    assert rc, r.stdout
    return rc[0], r.stderr.strip(), left


def _one_line(err: str, path: str, cause: str) -> None:
    assert err.count("\n") == 0, err
    assert path in err and cause in err, err
    assert "Traceback" not in err and "[Errno" not in err, err


def _runtime_pages() -> int:
    return -(-runtime.build().path.stat().st_size // PAGE)


@pytest.mark.parametrize("free", [0, 1, 4], ids=["at-the-lock", "at-the-first-file", "at-the-fifth-file"])
def test_a_full_home_stops_a_launch_with_one_line_and_no_run_folder(tmp_path: Path, free: int) -> None:
    _need_mounts()
    rc, err, left = in_full_home(tmp_path, free, *LAUNCH)
    assert rc != 0
    _one_line(err, f"{tmp_path}/m/td/runs/", "No space left on device")
    assert left == [f"{tmp_path}/m/td/runs"], left  # no run folder, no lock, no temporary file


@pytest.mark.parametrize("where", ["runtime", "spec"])
def test_a_full_home_stops_a_host_side_bench_with_one_line_and_nothing_left(tmp_path: Path, where: str) -> None:
    _need_mounts()
    free = 0 if where == "runtime" else _runtime_pages()  # room for the runtime, none for the job
    rc, err, left = in_full_home(tmp_path, free, *BENCH)
    assert rc != 0
    _one_line(err, f"{tmp_path}/m/td/", "No space left on device")
    assert not [p for p in left if p.endswith(".tmp")], left
    if where == "runtime":
        assert "uploading the runtime" in err and left == [], left
    else:
        assert "spec" in err, err
        runtime_file = f"{tmp_path}/m/td/lib/{runtime.build().name}"
        assert sorted(left) == [f"{tmp_path}/m/td/lib", runtime_file], left  # no job folder


@pytest.mark.parametrize("args", [LAUNCH, BENCH], ids=["launch", "bench"])
def test_a_home_that_is_a_file_is_one_line_naming_it(tmp_path: Path, args: tuple[str, ...]) -> None:
    home = tmp_path / "home"
    home.write_text("not a folder\n")
    env = {**os.environ, "TUNEDECK_HOME": str(home), "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [sys.executable, "-m", "tunedeck", *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=90
    )
    assert r.returncode != 0
    _one_line(r.stderr.strip(), str(home), "Not a directory")
    assert home.read_text() == "not a folder\n" and list(tmp_path.iterdir()) == [home]


#: the sshd's ``${TUNEDECK_HOME}`` ($1) becomes a tmpfs of $2 bytes in a mount namespace of its own
_SSHD_TMPFS = r"""mount -t tmpfs -o size=$2,mode=1777 tmpfs "$1" || exit 99
shift 2; exec "$@"
"""


@pytest.fixture(scope="module", params=["sftp", "cat"])
def full_sshd_server(request: pytest.FixtureRequest) -> Iterator[SshdServer]:
    """An sshd whose ``${TUNEDECK_HOME}`` is a tmpfs of :data:`PAGES` pages; ``cat``: one without
    an SFTP subsystem."""
    _need_mounts()
    size = str(PAGES * PAGE)
    yield from _serve(
        sftp=request.param == "sftp",
        wrap=lambda base: ["unshare", "-m", "sh", "-c", _SSHD_TMPFS, "sh", str(base / "remote-home"), size],
    )


@pytest.fixture
def full_sshd(full_sshd_server: SshdServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshdServer]:
    yield from _use(full_sshd_server, monkeypatch)


async def _fill(host: Host, home: Path, free: int) -> None:
    """Leave ``free`` pages in the host's home (a file ``fill``)."""
    r = await host.run(["sh", "-c", 'head -c "$2" /dev/zero > "$1/fill"', "sh", str(home), str((PAGES - free) * PAGE)])
    assert r.exit_status == 0, r.stderr


async def _left_and_empty(host: Host, home: Path) -> list[str]:
    """What is in the host's home besides ``fill``; then empty it for the next test."""
    r = await host.run(["find", str(home), "-mindepth", "1", "!", "-name", "fill"])
    await host.run(["sh", "-c", 'rm -rf -- "$1"/* "$1"/.[!.]*', "sh", str(home)])
    return r.stdout.split()


@pytest.mark.sshd
@pytest.mark.parametrize("free", [0, 4])
async def test_a_full_home_over_ssh_stops_the_runtime_upload_with_one_line_and_nothing_left(
    full_sshd: SshdServer, free: int
) -> None:
    from tunedeck.hostops.ssh import SshHost

    home = full_sshd.remote_home
    async with SshHost(full_sshd.target(TEST_USER), retry_attempts=1) as host:
        await _fill(host, home, free)
        try:
            with pytest.raises(runtime.RuntimeUnavailable) as info:
                await runtime.ensure(host)
        finally:
            left = await _left_and_empty(host, home)
        assert host.state == "connected"  # a full disk is not a lost link
    _one_line(str(info.value), f"uploading the runtime failed: {home}/lib/.{runtime.build().name}.", "")
    assert ".tmp: No space left on device" in str(info.value), info.value  # (without SFTP: "written with cat")
    assert left == [], left  # no partial file, and the lib folder the upload made is gone


@pytest.mark.sshd
async def test_a_full_home_over_ssh_fails_a_put_file_naming_it_and_removes_the_folders_it_made(
    full_sshd: SshdServer,
) -> None:
    from tunedeck.hostops.ssh import SshHost

    home = full_sshd.remote_home
    dest = f"{home}/a/b/c/blob"
    async with SshHost(full_sshd.target(TEST_USER), retry_attempts=1) as host:
        await _fill(host, home, 2)
        try:
            with pytest.raises(OSError) as info:
                await host.put_file(b"x" * 64 * 1024, dest)
        finally:
            left = await _left_and_empty(host, home)
    assert os_error_text(info.value).startswith(f"{dest}: No space left on device"), info.value
    assert info.value.errno == errno.ENOSPC
    assert left == [], left
