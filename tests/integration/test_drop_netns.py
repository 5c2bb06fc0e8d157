"""A silent DROP of the operator's link to a namespaced host (iptables inside the host's own
network namespace, tests/nshosts.py) while the real CLI follows it:

- ``tunedeck bench --host H`` of a host-side benchmark against a simulator on that host: the CLI
  says the link is lost within the liveness bound while the link is down, says it is back after,
  and reports the complete result (every request counted), exit 0; the host side of its follow
  (the remote ``tail``, heartbeat loop, ``sleep`` and ``dd``) is gone within the bound;
- ``tunedeck logs DEPLOYMENT --follow`` of a 2-node deployment with node B's link dropped: a line
  naming node B and the loss within the bound, and a line when it is back.

Heartbeat 1 s (bound 3 s); the SSH keepalive (15 s x 3) is far slower, so only the heartbeat can
be what noticed. The drop lasts ``TUNEDECK_TEST_DROP_S`` seconds (20 by default, so CI stays
short; the issue's 30 s: ``TUNEDECK_TEST_DROP_S=30``). The 150-s drop has tests of its own, marked
``long`` and run only on request: ``./scripts/test integration -m long -k drop``. Needs root and
``ip netns``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.clifix import Stderr
from tests.conftest import REPO, tunedeck_cmd
from tests.integration.test_hostside import sim
from tests.integration.test_hostside_ssh import bench_args
from tests.nshosts import NsHost, ns_hosts, ns_pids  # noqa: F401  (fixture)
from tests.simfix import free_port
from tests.sshd import ROOT_USER
from tests.waits import poll, scaled, until

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

DROP_S = float(os.environ.get("TUNEDECK_TEST_DROP_S", "20"))
#: the issue's long drop: its tests are marked ``long`` (``./scripts/test integration -m long``)
LONG_DROP_S = 150.0
BEAT_S = 1.0
#: the liveness bound: 3 missed heartbeats
BOUND_S = 3 * BEAT_S
#: what a loaded 2-core machine adds to a bound before a test calls it missed
SLACK_S = 4.0
#: after the link is back: a connect attempt begun during the drop (connect timeout 20 s) and the
#: follow's backoff (cap 10 s), then the reconnect itself
RESUME_S = 20 + 10 + 10


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (state first); [] once it is gone."""
    try:
        s = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return s[s.rindex(")") + 2 :].split()


def session_of(pid: int) -> int | None:
    f = _stat(pid)
    return int(f[3]) if f else None


def follow_sessions(h: NsHost, needle: str) -> set[int]:
    """The sessions of the host-side follows of ``needle`` (each SSH channel's command is a session
    of its own: its ``sh``, ``tail``, heartbeat loop, ``sleep`` and ``dd``)."""
    return {s for p, c in h.processes(needle) if "tail" in c and (s := session_of(p)) is not None}


def in_sessions(h: NsHost, sessions: set[int]) -> list[tuple[int, str]]:
    """The live processes of ``h`` in any of ``sessions``."""
    out = []
    for p in ns_pids(h.name):
        f = _stat(p)
        if f and f[0] not in ("Z", "X") and int(f[3]) in sessions:
            out.append((p, Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")))
    return out


@pytest.mark.timeout(300 + 2 * DROP_S)
def test_a_drop_during_a_host_side_bench_is_reported_resumed_and_the_result_is_complete(ns_hosts) -> None:
    bench_through_a_drop(ns_hosts, DROP_S)


@pytest.mark.long
@pytest.mark.timeout(300 + 2 * LONG_DROP_S)
def test_a_150_s_drop_during_a_host_side_bench_is_reported_resumed_and_the_result_is_complete(ns_hosts) -> None:
    bench_through_a_drop(ns_hosts, LONG_DROP_S)


def bench_through_a_drop(ns_hosts: Callable[[int], list[NsHost]], drop_s: float) -> None:
    from tunedeck.bench import store

    (h,) = ns_hosts(1)
    port = free_port()
    # ~0.55 s a request (50 ms TTFT + 50 tokens at 10 ms) at C=4: a run that outlasts the drop
    conc, out = 4, 50
    n = conc * int((drop_s + 15) / 0.55)
    env = h.sshd.client_env(TUNEDECK_HEARTBEAT_S=f"{BEAT_S:g}")
    with sim(port, netns=h.name):
        proc = subprocess.Popen(
            [*tunedeck_cmd(), "--host", h.sshd.target(), *bench_args(port, conc, n, out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )
        err = Stderr(proc)
        cut = False
        try:
            until(lambda: err.first("runs on") or proc.poll() is not None, 120, what="the job's start")
            assert proc.poll() is None, err.text()[-3000:]
            # the follow is up on the host, and heartbeats have flowed both ways
            sessions = until(lambda: follow_sessions(h, "events.jsonl"), 30, what="the follow's tail on the host")
            time.sleep(2 * BEAT_S)
            assert proc.poll() is None, "the run ended before the drop: make it longer"
            h.cut_operator()
            cut, cut_at = True, time.monotonic()
            lost = until(lambda: err.first("link to the host lost", cut_at), BOUND_S + SLACK_S + 10, what="link lost")
            reported = lost[0] - cut_at
            assert "no heartbeat" in lost[1], err.text()[-3000:]
            # the host side heard no heartbeat either: everything of that follow ends within the bound
            left = poll(lambda: not in_sessions(h, sessions), BOUND_S + SLACK_S, step=0.1)
            host_gone = time.monotonic() - cut_at
            assert left, in_sessions(h, sessions)
            time.sleep(max(0.0, cut_at + drop_s - time.monotonic()))
            h.restore_operator()
            cut, back_at = False, time.monotonic()
            back = until(lambda: err.first("link to the host is back", back_at), RESUME_S, what="the link back")
            resumed = back[0] - back_at
            out_text = err.finish(120)
        finally:
            if cut:
                h.restore_operator()
            err.kill()
            err.join()
    log = err.text()
    assert proc.returncode == 0, log[-3000:]
    s = json.loads(out_text)
    assert isinstance(s, dict), out_text[:500]
    assert s["completed"] == n and s["failed"] == 0 and not s["partial"], s
    idx = [x["index"] for x in store.read_samples(s["run_id"])]
    assert sorted(idx) == list(range(n))  # every request counted, once
    assert "ended without a final report" not in log, log[-3000:]
    print(
        f"bench, drop {drop_s:g} s: reported after {reported:.1f} s, the host's follow gone after {host_gone:.1f} s, "
        f"back {resumed:.1f} s after the link came back (bound {BOUND_S:g} s); {s['completed']}/{n} reported"
    )
    assert reported < BOUND_S + SLACK_S, log[-3000:]


@pytest.mark.timeout(360 + 2 * DROP_S)
def test_a_drop_of_one_node_is_named_by_logs_follow_of_its_deployment_and_its_return_too(
    ns_hosts, tmp_path: Path
) -> None:
    deployment_logs_through_a_drop(ns_hosts, tmp_path, DROP_S)


@pytest.mark.long
@pytest.mark.timeout(360 + 2 * LONG_DROP_S)
def test_a_150_s_drop_of_one_node_is_named_by_logs_follow_of_its_deployment_and_its_return_too(
    ns_hosts, tmp_path: Path
) -> None:
    deployment_logs_through_a_drop(ns_hosts, tmp_path, LONG_DROP_S)


def deployment_logs_through_a_drop(ns_hosts: Callable[[int], list[NsHost]], tmp_path: Path, drop_s: float) -> None:
    a, b = ns_hosts(2)
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "sg-2n.toml").write_text(
        "schema_version = 1\n"
        'engine = "sglang"\n'
        'model = "deepseek-ai/DeepSeek-V2-Lite-Chat"\n'
        "tp = 16\n"
        'python = "tdpython"\n'
        f"port = {free_port()}\n"
        f'nodes = ["{a.sshd.target(ROOT_USER)}", "{b.sshd.target(ROOT_USER)}"]\n'
        "\n[deploy]\n"
        f'head_address = "{a.ip}"\n'
        f"port = {free_port()}\n"
        "\n[flags]\n"
        "dist-timeout = 90\n"
    )
    env = a.sshd.client_env(TUNEDECK_HEARTBEAT_S=f"{BEAT_S:g}", TUNEDECK_PROFILES=str(user))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*tunedeck_cmd(), *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=scaled(240)
        )

    r = cli("launch", "sg-2n", "--sim", "--wait", "--timeout", "180", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    dep = json.loads(r.stdout)["deployment"]
    tb = b.sshd.target(ROOT_USER)
    member_b = next(m for m in dep["members"] if m["node"] == tb)
    tag_b = tb if member_b["kind"] == "server" else f"{tb}:{member_b['kind']}"  # as logs tags its lines
    proc = subprocess.Popen(
        [*tunedeck_cmd(), "logs", dep["deploy_id"], "--follow"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    err = Stderr(proc)
    cut = False
    try:
        # node B's log is followed from its host (a tail of its run's log)
        sessions = until(
            lambda: follow_sessions(b, f"{member_b['run_id']}/log"), 60, what="the follow's tail on node B"
        )
        time.sleep(2 * BEAT_S)
        assert proc.poll() is None, err.text()[-3000:]
        b.cut_operator()  # the operator's link to node B; the nodes still reach each other
        cut, cut_at = True, time.monotonic()
        lost = until(lambda: err.first(f"{tag_b}: log link lost", cut_at), BOUND_S + SLACK_S + 20, what="link lost")
        reported = lost[0] - cut_at
        assert "no heartbeat" in lost[1], err.text()[-3000:]
        left = poll(lambda: not in_sessions(b, sessions), BOUND_S + SLACK_S, step=0.1)
        host_gone = time.monotonic() - cut_at
        assert left, in_sessions(b, sessions)
        time.sleep(max(0.0, cut_at + drop_s - time.monotonic()))
        b.restore_operator()
        cut, back_at = False, time.monotonic()
        back = until(lambda: err.first(f"{tag_b}: log link back", back_at), RESUME_S, what="the link back")
        resumed = back[0] - back_at
        assert proc.poll() is None, err.text()[-3000:]  # still following
        assert not [x for _, x in err.lines if "link lost" in x and tag_b not in x], err.text()[-3000:]
    finally:
        if cut:
            b.restore_operator()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        err.join()
        r = cli("stop", dep["deploy_id"], "--yes", "--grace", "5", "--json")
    print(
        f"logs --follow, drop {drop_s:g} s: {tag_b} reported after {reported:.1f} s, its host's follow gone after "
        f"{host_gone:.1f} s, back {resumed:.1f} s after the link came back (bound {BOUND_S:g} s)"
    )
    assert reported < BOUND_S + SLACK_S, err.text()[-3000:]
    assert r.returncode == 0, r.stderr + r.stdout
