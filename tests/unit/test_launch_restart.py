"""The host-side launch script restarting a job in its own folder (a killed campaign resumes
there), under dash, bash and busybox sh: it starts the job only while the folder still holds the
process the caller saw end, so of two restarts at once one starts it and the other is handed that
process; the ended process's log is kept (rotated, bounded); a write that fails leaves the
folder, its state and results, in place. The script runs here as ``SHELL -s -- ARGS``, as
``Host.run_script`` sends it.
"""

from __future__ import annotations

import subprocess
from functools import partial
from pathlib import Path
from typing import Sequence

import pytest

from tests.launchscript import script_result, start_script
from tests.unit.test_hardening_sh import SHELLS
from tests.waits import until
from tunedeck.hostops.launcher import launch_script
from tunedeck.hostops.runstore import new_run_id

pytestmark = pytest.mark.timeout(120)

TRIALS = 4
KEPT_BYTES = 1 << 20


def _spawn(
    shell: list[str], home: Path, rid: str, argv: Sequence[str], expect: tuple[int | None, str | None] | None
) -> subprocess.Popen[str]:
    script, args = launch_script("tune", rid, list(argv), {}, {"run_id": rid}, expect=expect)
    return start_script(shell, script, args, home, cwd=home)


#: the script's answer: ('PID', [pid, starttime]) | ('FOLLOW', [pid, starttime]) | ('ERR', [message])
_result = partial(script_result, other="FOLLOW")


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _ended_job(shell: list[str], home: Path, started: list[int], last_words: str = "") -> tuple[str, int, str]:
    """A job folder whose process has ended (its last words on stderr, in its log): (id, pid, start time)."""
    rid = new_run_id()
    kind, (pid, st) = _result(
        _spawn(shell, home, rid, ["sh", "-c", f"echo {last_words or 'ended'} >&2"], None), started
    )
    assert kind == "PID"
    until(lambda: (home / "tune" / rid / "rc").exists() and _gone(int(pid)), 30, what="the job's end")
    return rid, int(pid), st


@pytest.mark.parametrize("shell", SHELLS)
def test_of_two_restarts_at_once_one_starts_it_and_the_other_follows_that_process(
    shell: list[str], tmp_path: Path, started: list[int]
) -> None:
    for trial in range(TRIALS):
        home = tmp_path / f"trial{trial}"
        home.mkdir()
        rid, pid, st = _ended_job(shell, home, started)
        spawned = [_spawn(shell, home, rid, ["sleep", "300"], (pid, st)) for _ in range(2)]
        results = sorted(_result(p, started) for p in spawned)
        assert [kind for kind, _ in results] == ["FOLLOW", "PID"], (trial, results)
        (_, fpid), (_, wpid) = results
        assert fpid == wpid, results  # the one that started nothing is handed the one that did
        d = home / "tune" / rid
        assert (d / "pid").read_text().strip() == wpid[0] and not (d / "rc").exists()
        # a third, late, with the same dead process in mind: the live one is followed
        assert _result(_spawn(shell, home, rid, ["sleep", "300"], (pid, st)), started) == ("FOLLOW", wpid)
        # and one asking to replace that live process itself: it still runs, nothing is started
        assert _result(_spawn(shell, home, rid, ["sleep", "300"], (int(wpid[0]), wpid[1])), started) == (
            "FOLLOW",
            wpid,
        )


@pytest.mark.parametrize("shell", SHELLS)
def test_a_restart_keeps_the_ended_processes_logs_rotated_and_bounded(
    shell: list[str], tmp_path: Path, started: list[int]
) -> None:
    rid, pid, st = _ended_job(shell, tmp_path, started, "first-died")
    d = tmp_path / "tune" / rid
    for n in range(2, 6):  # four restarts, each of a process that ended with its own last words
        kind, (pid2, st2) = _result(
            _spawn(shell, tmp_path, rid, ["sh", "-c", f"echo died-{n} >&2"], (pid, st)), started
        )
        assert kind == "PID"
        pid, st = int(pid2), st2
        until(lambda p=pid: (d / "rc").exists() and _gone(p), 30, what="the restarted job's end")
        if n == 2:  # the first process's last words, kept
            assert (d / "log.1").read_text() == "first-died\n" and (d / "log").read_text() == "died-2\n"
    assert sorted(p.name for p in d.glob("log*")) == ["log", "log.1", "log.2", "log.3"]
    assert (d / "log").read_text() == "died-5\n"
    assert [(d / f"log.{i}").read_text() for i in (1, 2, 3)] == ["died-4\n", "died-3\n", "died-2\n"]


@pytest.mark.parametrize("shell", SHELLS)
def test_a_long_log_is_kept_as_its_end(shell: list[str], tmp_path: Path, started: list[int]) -> None:
    rid, pid, st = _ended_job(shell, tmp_path, started, "first-died")
    d = tmp_path / "tune" / rid
    with (d / "log").open("ab") as f:
        f.write(b"x" * (KEPT_BYTES + 5000) + b"\nthe-end\n")
    assert _result(_spawn(shell, tmp_path, rid, ["sleep", "300"], (pid, st)), started)[0] == "PID"
    kept = (d / "log.1").read_bytes()
    assert len(kept) == KEPT_BYTES and kept.endswith(b"x\nthe-end\n")


@pytest.mark.parametrize("shell", SHELLS)
def test_a_restart_whose_write_fails_leaves_the_folder(shell: list[str], tmp_path: Path, started: list[int]) -> None:
    rid, pid, st = _ended_job(shell, tmp_path, started)
    d = tmp_path / "tune" / rid
    (d / "state.json").write_text('{"candidates": []}')
    (d / "meta.json").unlink()
    (d / "meta.json").mkdir()  # a write there fails, as on a full disk
    kind, (msg,) = _result(_spawn(shell, tmp_path, rid, ["sleep", "300"], (pid, st)), started)
    assert kind == "ERR" and msg.startswith(f"cannot write {d}/meta.json"), msg
    assert (d / "state.json").read_text() == '{"candidates": []}'  # the campaign's state is not removed


@pytest.mark.parametrize("shell", SHELLS)
def test_a_restart_of_a_folder_that_is_not_a_job_is_refused(
    shell: list[str], tmp_path: Path, started: list[int]
) -> None:
    kind, (msg,) = _result(_spawn(shell, tmp_path, new_run_id(), ["sleep", "300"], (None, None)), started)
    assert kind == "ERR" and "is not a job folder" in msg
