"""A finished benchmark is never reported lost: five host-side benchmarks against the simulator,
each with its SSH session killed once (``sshd: user@notty``) at a different moment, from early in
the run to when the job is finishing or done. Each reports its result, with the counts of an uncut
run, and ``--json`` is the summary, never ``[]``. Needs the real sshd (tests/sshd.py)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.clifix import Stderr
from tests.conftest import REPO, tunedeck_cmd
from tests.integration.test_hostside import sim
from tests.integration.test_hostside_ssh import bench_args, cli
from tests.simfix import free_port
from tests.sshd import TEST_USER, SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

#: when the session is killed, one run each: fractions of the uncut run's time from its job's
#: start to the command's end (measured here, so the kills spread over the run on any machine).
#: TUNEDECK_TEST_KILLS=N spreads N kills evenly instead (the 20-kill figure in
#: docs/reliability-tests.md); a CI run kills five times
_KILLS = int(os.environ.get("TUNEDECK_TEST_KILLS", "0") or 0)
KILL_AT = tuple((i + 0.5) / _KILLS for i in range(_KILLS)) if _KILLS > 0 else (0.15, 0.35, 0.55, 0.75, 0.95)


@pytest.mark.timeout(900 + 120 * max(0, _KILLS - 5))
def test_five_session_kills_during_host_side_benchmarks_each_report_the_uncut_result(sshd: SshdServer) -> None:
    from tunedeck.bench import store

    target = sshd.target(TEST_USER)
    port = free_port()
    conc, n, out = 32, 512, 50  # 16 rounds of ~0.55 s at a fixed 50 ms TTFT and 10 ms ITL
    env = {"TUNEDECK_HEARTBEAT_S": "1"}
    keys = ("completed", "failed", "num_prompts", "total_output_tokens")
    with sim(port):
        t0 = time.monotonic()
        uncut = cli(sshd, "--host", target, *bench_args(port, conc, n, out), **env)
        span = time.monotonic() - t0
        assert uncut.returncode == 0, uncut.stderr[-3000:]
        ref = json.loads(uncut.stdout)
        assert ref["completed"] == n
        for frac in KILL_AT:
            proc = subprocess.Popen(
                [*tunedeck_cmd(), "--host", target, *bench_args(port, conc, n, out)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
                env=sshd.client_env(**env),
            )
            err = Stderr(proc)
            t1 = time.monotonic()
            err.wait_for("runs on", timeout=120)
            at = max(0.0, t1 + frac * span - time.monotonic())
            time.sleep(at)
            at = time.monotonic() - t1
            killed = sshd.kill_sessions(TEST_USER)
            out_text = err.finish(300)
            err.join()
            log = err.text()
            assert proc.returncode == 0, (at, killed, log[-3000:])
            s = json.loads(out_text)
            assert isinstance(s, dict), (at, out_text[:500])  # the summary, never []
            for key in keys:
                assert s[key] == ref[key], (at, key, s[key], ref[key])
            assert not s["partial"], at
            idx = [x["index"] for x in store.read_samples(s["run_id"])]
            assert len(idx) == n and len(set(idx)) == n, at  # every sample copied, none twice
            assert "ended without a final report" not in log, (at, log[-2000:])
            links = log.count("link to the host lost")
            assert links <= 3, (at, log[-3000:])  # the kill's own report and a retry or two, no idle noise
            print(
                f"kill at {at:.1f} s of {span:.1f} s: {killed} session(s) killed, exit 0, {s['completed']}/{n} reported, {links} link message(s)"
            )
