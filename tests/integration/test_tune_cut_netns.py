"""A tuning campaign (``tunedeck tune --host H --sim``) through three silent drops of the operator's
link and one ``kill -9`` of its host-side process, on a host in a network namespace with a real
sshd (tests/nshosts.py; DROP rules inside the host's namespace, never the machine's firewall).

A small campaign runs with the link dropped three times (each drop held until the CLI says the link
is lost, then restored) and the campaign's process killed on the host during the second drop. The CLI follows it by itself: it
says each loss and each return, restarts the killed campaign when the link is back (it resumes
from its state: finished candidates kept, the interrupted one redone) and reports; the third drop
comes after the restart. Then: exit 0, every candidate measured once but the interrupted one
(its killed launch kept, marked ``interrupted``), the job folder's events and benchmark results
say the same, and the ranking equals an untouched run's: the model's, whose neighbours differ by a
factor of two (an untouched campaign ranks as the model does: tests/integration/test_tune_demo.py).

The candidates are one SGLang profile with ``max-running-requests`` 8 (the base), 4 and 16: the
simulator's capacity at the SLO is that limit (a request more waits for a whole one), so the
ranking is 16, 8, 4 with a factor of two between neighbours, far past a loaded machine's noise.
Heartbeat 1 s (bound 3 s); the SSH keepalive (15 s x 3) is far slower, so only the heartbeat can
be what noticed. Needs root and ``ip netns``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.clifix import Stderr
from tests.conftest import REPO, tunedeck_cmd
from tests.integration.test_drop_netns import BEAT_S, BOUND_S, RESUME_S, SLACK_S, _stat
from tests.nshosts import NsHost, ns_hosts, ns_pids  # noqa: F401  (fixture)
from tests.simfix import free_port
from tests.waits import until

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

BASE = "mrr"
#: the candidates' names, in the campaign's order, and their capacity in the simulator's model
CANDS = {BASE: 8, f"{BASE}+max-running-requests=4": 4, f"{BASE}+max-running-requests=16": 16}
CAMPAIGN = [
    "--sim",
    "--vary",
    "flags.max-running-requests=4,16",
    "--slo",
    "ttft_p90:200",
    "tpot_p90:30",
    # short levels (2 x C requests of 16 tokens), C = 1, then 4, 8, 16 …: at most 5 steps each
    "--input-len",
    "64",
    "--output-len",
    "16",
    "--prompts-per-c",
    "2",
    "--min-prompts",
    "6",
    "--start",
    "4",
    "--max-steps",
    "5",
    "--repeats-max",
    "1",
    "--yes",
]


def _profile(folder: Path) -> None:
    (folder / f"{BASE}.toml").write_text(
        "schema_version = 1\n"
        'engine = "sglang"\n'
        'model = "Qwen/Qwen3-8B"\n'
        "tp = 2\n"
        f"port = {free_port()}\n"
        "\n[env]\n"
        'TUNEDECK_SIM_LOAD_S = "0.5"\n'
        "\n[flags]\n"
        "max-running-requests = 8\n"
    )


def host_events(job_dir: Path) -> list[dict[str, Any]]:
    """The campaign's events as the host's job folder holds them (complete lines)."""
    try:
        raw = (job_dir / "events.jsonl").read_bytes()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in raw[: raw.rfind(b"\n") + 1].splitlines() if line.strip()]


def measuring(job_dir: Path) -> str | None:
    """The candidate the campaign is measuring now (a benchmark level begun, no capacity yet), once
    another candidate has finished; else None."""
    evs = [e for e in host_events(job_dir) if e.get("type") == "ab"]
    if not any(e["kind"] == "capacity" for e in evs):
        return None
    launched = [i for i, e in enumerate(evs) if e["kind"] == "launch"]
    if not launched:
        return None
    cand = evs[launched[-1]]["side"]
    after = [e["kind"] for e in evs[launched[-1] :] if e.get("side") == cand]
    return cand if "bench-start" in after and "capacity" not in after else None


def kill_campaign(h: NsHost, job_dir: Path) -> list[int]:
    """SIGKILL the campaign's process under its wrapper (no report, no exit event), as the OOM
    killer would; the wrapper writes its rc."""
    wrapper = int((job_dir / "pid").read_text().strip())
    kids = [p for p in ns_pids(h.name) if (f := _stat(p)) and int(f[1]) == wrapper]
    for k in kids:
        os.kill(k, signal.SIGKILL)
    return kids


class Link:
    """The operator's link to ``h``, dropped and restored, with what the CLI said when."""

    def __init__(self, h: NsHost, err: Stderr) -> None:
        self.h = h
        self.err = err
        self.down = False
        self.figures: list[dict[str, float]] = []

    def cut(self) -> float:
        self.h.cut_operator()
        self.down = True
        t = time.monotonic()
        lost = until(lambda: self.err.first("no heartbeat from the host", t), BOUND_S + SLACK_S + 10, what="link lost")
        assert "tunedeck tune: link to" in lost[1] and " lost (" in lost[1], self.err.text()[-3000:]
        self.figures.append({"cut": t, "noticed": lost[0] - t})
        return t

    def restore(self) -> None:
        self.h.restore_operator()
        self.down = False
        t = time.monotonic()
        fig = self.figures[-1]
        fig["held"] = t - fig["cut"]
        back = until(lambda: self.err.first("is back; following the campaign again", t), RESUME_S, what="the link back")
        fig["back"] = back[0] - t


@pytest.mark.timeout(480)
def test_a_campaign_through_three_drops_and_a_host_side_kill_ranks_as_an_uncut_run(ns_hosts, tmp_path: Path) -> None:
    (h,) = ns_hosts(1)
    for name in ("nvidia-smi", "tdpython"):  # a bare host: the campaign runs the runtime's simulator
        (h.sshd.shim_dir / name).unlink(missing_ok=True)
    user = tmp_path / "profiles"
    user.mkdir()
    _profile(user)
    env = h.sshd.client_env(TUNEDECK_HEARTBEAT_S=f"{BEAT_S:g}", TUNEDECK_PROFILES=str(user), PYTHONPATH=str(REPO))
    tune = [*tunedeck_cmd(), "tune", BASE, "--host", h.sshd.target(), *CAMPAIGN]

    # an untouched run's ranking: the model's, a factor of two between neighbours
    uncut = sorted(CANDS, key=lambda n: -CANDS[n])
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*tune, "--json", str(tmp_path / "cut.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    err = Stderr(proc)
    link = Link(h, err)
    try:
        started = until(lambda: err.first("campaign job ") or proc.poll() is not None, 120, what="the campaign's start")
        assert proc.poll() is None, err.text()[-3000:]
        jid = started[1].split("campaign job ", 1)[1].split()[0]
        job_dir = h.sshd.remote_home / "tune" / jid
        # drop 1: while the first candidate is measured
        until(lambda: any(e.get("kind") == "bench-start" for e in host_events(job_dir)), 60, what="the first level")
        link.cut()
        link.restore()
        # drop 2: the campaign's process killed on the host meanwhile, during a later candidate
        until(lambda: sum(e.get("kind") == "launch" for e in host_events(job_dir)) >= 2, 60, what="a second launch")
        link.cut()
        killed = until(lambda: measuring(job_dir), 60, what="a candidate being measured")
        kill_at = time.monotonic()
        assert kill_campaign(h, job_dir), "the campaign's process is not running"
        assert not (job_dir / "report.json").exists()
        link.restore()
        restarted = until(lambda: err.first("restarting it to resume", kill_at), 60, what="the restart")
        resumed = until(lambda: err.first("resumed (restart 1)", kill_at), 60, what="the campaign resumed")
        # drop 3: the restarted campaign is followed through it too
        assert not (job_dir / "report.json").exists(), "the campaign ended before the third drop: make it longer"
        link.cut()
        link.restore()
        assert not (job_dir / "report.json").exists(), "the campaign ended during the third drop: make it longer"
        err.finish(240)
    finally:
        if link.down:
            h.restore_operator()
        err.kill()
        err.join()
    cut_s = time.monotonic() - t0
    log = err.text()
    assert proc.returncode == 0, log[-4000:]
    rep = json.loads((tmp_path / "cut.json").read_text())
    assert rep["status"] == "completed" and rep["resumes"] == 1, rep.get("error")

    # every candidate measured once, but the interrupted one: its killed launch kept and redone
    launches = {c["name"]: [bool(la.get("interrupted")) for la in c["launches"]] for c in rep["candidates"]}
    assert launches == {n: ([True, False] if n == killed else [False]) for n in CANDS}, launches
    assert all(len(c["measurements"]) == 1 for c in rep["candidates"]), rep["candidates"]
    # the job folder says the same: one capacity each, one launch each and one more for the redone
    evs = [e for e in host_events(job_dir) if e.get("type") == "ab"]
    for n in CANDS:
        assert sum(e["kind"] == "capacity" and e["side"] == n for e in evs) == 1, n
        assert sum(e["kind"] == "launch" and e["side"] == n for e in evs) == (2 if n == killed else 1), n
    # the ranking equals an untouched run's
    assert rep["ranking"] == uncut and rep["winner"] == uncut[0], (rep["ranking"], uncut)
    # and its benchmark results: each launch measured its steps once; the killed one, up to the kill
    levels: dict[str, int] = {}
    for meta in (job_dir / "data" / "results").glob("*/meta.json"):
        m = json.loads(meta.read_text())
        levels[m["server"]["launch_run_id"]] = levels.get(m["server"]["launch_run_id"], 0) + 1
    for c in rep["candidates"]:
        done, cut_short = (
            [la for la in c["launches"] if la.get("done")],
            [la for la in c["launches"] if la.get("interrupted")],
        )
        assert len(done) == 1 and levels.pop(done[0]["launch_run_id"]) == len(c["steps"]), (c["name"], levels)
        for la in cut_short:
            assert levels.pop(la["launch_run_id"], 0) <= len(c["steps"]), (c["name"], levels)
    assert levels == {}, levels  # no level of a launch the report does not name
    assert h.processes(" sim sglang ") == [], "a server left running on the host"
    assert log.count("restarting it to resume") == 1 and "[0/0]" not in restarted[1], log[-4000:]
    for i, f in enumerate(link.figures, 1):
        print(
            f"drop {i}: held {f['held']:.1f} s, told lost after {f['noticed']:.1f} s, "
            f"back {f['back']:.1f} s after the link came back"
        )
    assert all(f["noticed"] < BOUND_S + SLACK_S for f in link.figures), link.figures
    print(
        f"kill during drop 2 ({killed}): restarted {restarted[0] - kill_at:.1f} s after the kill "
        f"({restarted[0] - link.figures[1]['cut'] - link.figures[1]['held']:.1f} s after the link came back), "
        f"resumed {resumed[0] - kill_at:.1f} s after it; this run {cut_s:.1f} s"
    )
