"""The host-side launch script: its check for a live run on the same GPUs and the start are one
atomic step (a lock taken with ``mkdir``), under dash, bash and busybox sh (issue "Hardening,
round three", item 4). The script runs here as ``SHELL -s -- ARGS``, as ``Host.run_script`` sends it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import partial
from pathlib import Path

import pytest

from tests.launchscript import script_result, start_script
from tests.unit.test_hardening_sh import SHELLS
from tunedeck.hostops.launcher import gpu_set, launch_script
from tunedeck.hostops.runstore import new_run_id

pytestmark = pytest.mark.timeout(120)

TRIALS = 5


def _spawn(
    shell: list[str], home: Path, gpus: str | None, path: str | None = None
) -> tuple[str, subprocess.Popen[str]]:
    rid = new_run_id()
    script, args = launch_script("runs", rid, ["sleep", "300"], {}, {"run_id": rid}, gpus=gpus)
    return rid, start_script(shell, script, args, home, path=path)


#: the script's answer: ('PID', [pid, starttime]) | ('BUSY', [run id, pid, gpus]) | ('ERR', [message])
_result = partial(script_result, other="BUSY")


def _at_once(
    shell: list[str], home: Path, gpus: tuple[str, str], started: list[int]
) -> list[tuple[str, str, list[str]]]:
    spawned = [_spawn(shell, home, g) for g in gpus]
    return [(rid, *_result(p, started)) for rid, p in spawned]


@pytest.mark.parametrize("shell", SHELLS)
def test_of_two_launches_at_once_on_the_same_gpus_exactly_one_starts(
    shell: list[str], tmp_path: Path, started: list[int]
) -> None:
    for trial in range(TRIALS):
        home = tmp_path / f"trial{trial}"
        results = _at_once(shell, home, ("all", "all"), started)
        kinds = sorted(kind for _, kind, _ in results)
        assert kinds == ["BUSY", "PID"], results
        (first,) = [rid for rid, kind, _ in results if kind == "PID"]
        (busy,) = [rest for _, kind, rest in results if kind == "BUSY"]
        assert busy[0] == first and int(busy[1]) == started[-1]  # the refusal names the run that started
        runs = [d.name for d in (home / "runs").iterdir() if d.is_dir() and not d.name.startswith(".")]
        assert runs == [first]  # the refused launch left no folder
        assert not (home / "runs" / ".launch.lock").exists()  # the lock is released either way


@pytest.mark.parametrize("shell", SHELLS)
def test_only_shared_gpus_refuse(shell: list[str], tmp_path: Path, started: list[int]) -> None:
    results = _at_once(shell, tmp_path, ("0,1", "2,3"), started)
    assert [kind for _, kind, _ in results] == ["PID", "PID"], results
    # a third on GPU 3 shares with the second; one on no GPU shares with none
    p3, p4 = _spawn(shell, tmp_path, "3")[1], _spawn(shell, tmp_path, "none")[1]
    kind3, rest3 = _result(p3, started)
    assert (kind3, rest3[0], rest3[2]) == ("BUSY", results[1][0], "2,3")
    assert _result(p4, started)[0] == "PID"
    # without a GPU set (a deployment member, checked before) nothing is refused
    assert _result(_spawn(shell, tmp_path, None)[1], started)[0] == "PID"
    assert (tmp_path / "runs" / results[0][0] / "gpus").read_text() == "0,1\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_a_lock_left_by_a_killed_launch_is_taken_over(shell: list[str], tmp_path: Path, started: list[int]) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    lock = tmp_path / "runs" / ".launch.lock"
    lock.mkdir(parents=True)
    (lock / "pid").write_text(f"{gone.pid}\n")
    kind, _ = _result(_spawn(shell, tmp_path, "all")[1], started)
    assert kind == "PID"
    assert not lock.exists()


#: ``cat`` and ``rm`` that dawdle 0-150 ms (by their pid) on the lock's files, as on a loaded
#: host: the window between a waiter's look at a dead holder and its move is wide open
_SLOW = """#!/bin/sh
case "$*" in *.launch.lock*) sleep "0.$(( $$ % 4 * 5 ))" ;; esac
exec {real} "$@"
"""

STALE_TRIALS = 10


@pytest.mark.parametrize("shell", SHELLS)
def test_of_three_launches_racing_for_a_dead_lock_exactly_one_starts(
    shell: list[str], tmp_path: Path, started: list[int]
) -> None:
    shims = tmp_path / "bin"
    shims.mkdir()
    for tool in ("cat", "rm"):
        (shims / tool).write_text(_SLOW.format(real=shutil.which(tool)))
        (shims / tool).chmod(0o755)
    path = f"{shims}:{os.environ['PATH']}"
    for trial in range(STALE_TRIALS):
        home = tmp_path / f"trial{trial}"
        gone = subprocess.Popen(["true"])
        gone.wait()
        lock = home / "runs" / ".launch.lock"
        lock.mkdir(parents=True)
        (lock / "pid").write_text(f"{gone.pid}\n")  # its holder was killed
        spawned = [_spawn(shell, home, "all", path) for _ in range(3)]
        results = [(rid, *_result(p, started)) for rid, p in spawned]
        kinds = sorted(kind for _, kind, _ in results)
        assert kinds == ["BUSY", "BUSY", "PID"], (trial, results)
        (first,) = [rid for rid, kind, _ in results if kind == "PID"]
        assert all(rest[0] == first for _, kind, rest in results if kind == "BUSY"), results
        assert not lock.exists()


def test_gpu_set_reads_cuda_visible_devices() -> None:
    assert gpu_set({}) == "all"
    assert gpu_set({"CUDA_VISIBLE_DEVICES": " 0, 1 ,"}) == "0,1"
    assert gpu_set({"CUDA_VISIBLE_DEVICES": ""}) == "none"
    assert gpu_set({"CUDA_VISIBLE_DEVICES": "GPU-8c2f,MIG-1"}) == "GPU-8c2f,MIG-1"
    assert gpu_set({"CUDA_VISIBLE_DEVICES": "0;rm -rf /"}) == "all"  # not a list of ids: every GPU
