"""A deployment's worker serves no HTTP: it reads ``up (worker)`` once the head is ready *and* its
own start-up has ended (its log past weight loading, or quiet since the head became ready), not
merely because it is alive when the head turns ready."""

from __future__ import annotations

import os
import time

import pytest

from tests.deployfix import tp_deployment
from tunedeck.hostops.localhost import LocalHost
from tunedeck.hostops.runstore import READY, STARTING, WORKER_UP, RunRecord, RunStore
from tunedeck.logparse import parse_text
from tunedeck.services import deploy as D

QUIET = D.WORKER_QUIET_S
LOADING = (
    "[2026-03-02 09:00:01 TP8] Init torch distributed begin.\n"
    "[2026-03-02 09:00:09 TP8] Load weight begin. avail mem=78.50 GB\n"
)
LOADED = LOADING + (
    "[2026-03-02 09:00:21 TP8] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=63.10 GB, "
    "mem usage=15.40 GB.\n"
)
CAPTURED = (
    LOADED + "[2026-03-02 09:00:22 TP8] KV Cache is allocated. #tokens: 402123, K size: 27.60 GB, V size: 27.60 GB\n"
)
OOM = LOADING + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"


@pytest.mark.parametrize(
    "log,age,head_for,up",
    [
        (LOADED, 0.0, 0.0, True),  # its weights are loaded: up as soon as the head is
        (CAPTURED, 0.0, 0.0, True),  # a phase past weight loading
        (LOADING, 0.0, 0.0, False),  # still loading its weights, its log moving
        (LOADING, 0.0, QUIET * 3, False),  # the head long ready, but the worker's log still grows
        (LOADING, QUIET * 3, 1.0, False),  # quiet, but the head only just became ready
        (LOADING, QUIET, QUIET, True),  # quiet since the head became ready
        ("", QUIET * 3, QUIET * 3, True),  # a worker that logs no phase at all, quiet
        (OOM, QUIET * 3, QUIET * 3, False),  # a fatal line: never up
    ],
)
def test_a_worker_is_up_only_once_its_own_start_up_ended(log, age, head_for, up):
    state, _ = parse_text(log)
    assert D.worker_start_ended(state, age, head_for) is up


def test_a_worker_with_no_log_read_is_up_only_when_quiet_is_known():
    assert not D.worker_start_ended(None, None, QUIET * 3)
    assert D.worker_start_ended(None, QUIET, QUIET)


def _deployment(tmp_path, worker_log: str, *, head_ready_ago: float) -> tuple[D.DeploymentRecord, RunStore]:
    runs = RunStore()
    now = time.time()
    head = RunRecord("aa0100a0", "gpu-a", ["sglang"], engine="sglang", status=READY, run_dir="/x", pid=1)
    head.timeline.append({"t": now - head_ready_ago, "event": READY})
    wdir = tmp_path / "worker"
    wdir.mkdir()
    (wdir / "log").write_text(worker_log, encoding="utf-8")
    worker = RunRecord("aa0100b1", "gpu-b", ["sglang"], engine="sglang", status=STARTING, run_dir=str(wdir), pid=2)
    runs.save(head)
    runs.save(worker)
    rec = tp_deployment(
        "aa0100", ["gpu-a", "gpu-b"], [head.run_id, worker.run_id], profile="p", created=now, status=READY
    )
    return rec, runs


async def test_the_re_read_marks_a_worker_up_from_its_own_log_on_its_node(tmp_path):
    """The listings' re-read (``runs``, the Runs and fleet views) reads the worker's log on its
    node: still loading its weights, it stays starting; once past them it is up (worker)."""
    rec, runs = _deployment(tmp_path, LOADING, head_ready_ago=1.0)
    hosts = {"gpu-b": LocalHost()}
    assert await D.workers_done(rec, runs, hosts) == set()
    D.settle_deployment(rec, runs, workers_up=set())
    assert runs.load("aa0100b1").status == STARTING
    (tmp_path / "worker" / "log").write_text(LOADED, encoding="utf-8")
    up = await D.workers_done(rec, runs, hosts)
    assert up == {"aa0100b1"}
    assert D.mark_workers_up(rec, runs, up) == ["aa0100b1"]
    assert runs.load("aa0100b1").status == WORKER_UP
    # a worker on a node the caller has no connection to is not judged (it stays as it was)
    assert await D.workers_done(rec, runs, {}) == set()


async def test_the_re_read_counts_a_worker_quiet_since_the_head_became_ready(tmp_path):
    rec, runs = _deployment(tmp_path, LOADING, head_ready_ago=QUIET * 3)
    log = tmp_path / "worker" / "log"
    os.utime(log, (time.time() - QUIET * 2, time.time() - QUIET * 2))
    assert await D.workers_done(rec, runs, {"gpu-b": LocalHost()}) == {"aa0100b1"}
    os.utime(log, None)  # it just wrote a line: not quiet
    assert await D.workers_done(rec, runs, {"gpu-b": LocalHost()}) == set()
