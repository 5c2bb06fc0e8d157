"""A run is ready only on its own evidence, and a dead run reads failed everywhere (demo host).

* Another HTTP server already answers on the profile's port: ``preflight`` is an error naming it
  (this test process: its pid); forced past pre-flight (``launch --cmd``), ``launch --wait`` never
  says ready although ``/health`` answered 200 all along, the run ends ``failed: port … already in
  use`` and the journal says failed.
* A run that served and then crashed (``--sim-fault crash``), with nothing following it, reads
  ``failed`` with its cause in ``runs``, in ``logs --follow`` and in the journal, where the
  correction is appended (the ``ready`` record stays).
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.integration.test_launcher import free_port
from tunedeck.ab.journal import journal_path

pytestmark = pytest.mark.timeout(240)


class _Answers200(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def squatter() -> Iterator[tuple[int, list[str]]]:
    """A plain HTTP server (in this process) answering 200 to everything on a free port."""
    port = free_port()
    handler = type("Squatter", (_Answers200,), {"hits": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield port, handler.hits
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def td(tmp_path: Path) -> Iterator[object]:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TUNEDECK_PROFILES": str(profiles)}

    def run(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*tunedeck_cmd(), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
        )

    run.profiles = profiles  # type: ignore[attr-defined]
    yield run
    run("stop", "--demo", "--yes", "--grace", "2")


def _journal(td) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    rows = json.loads(td("journal", "list", "--json", "--kind", "launch").stdout)
    return {e["id"]: e for e in rows}


def test_port_held_by_another_server_is_a_preflight_error_and_never_ready(td, squatter) -> None:  # type: ignore[no-untyped-def]
    port, hits = squatter
    (td.profiles / "squat.toml").write_text(
        f'schema_version = 1\nengine = "sglang"\nmodel = "Qwen/Qwen3-8B"\ntp = 2\nport = {port}\n'
    )
    r = td("preflight", "squat", "--demo", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    errors = [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "error"]
    assert [f["code"] for f in errors] == ["port.in-use"], errors
    assert f"port {port} is already in use on demo by pid {os.getpid()} (" in errors[0]["message"]

    # forced past pre-flight: the engine loads for 6 s while the other server answers /health
    r = td(
        "launch", "--demo", "--wait", "--json", "--timeout", "120", "--cmd", "tunedeck", "sim", "sglang",
        "--model-path", "Qwen/Qwen3-8B", "--tp-size", "2", "--port", str(port), "--sim-load-seconds", "6",
    )  # fmt: skip
    assert r.returncode == 1, r.stderr[-3000:]
    assert "/health" in hits  # the tracker asked, and another process said 200
    out = json.loads(r.stdout)
    assert out["progress"]["state"] == "failed"
    assert out["progress"]["diagnosis"] == f"port {port} already in use"
    assert "ready after" not in r.stderr and "] ready" not in r.stderr, r.stderr[-3000:]
    assert f"failed: port {port} already in use" in r.stderr
    # while it loaded, the live line said who answers instead of the run
    assert f"port {port} is answered by another process: pid {os.getpid()}" in r.stderr
    rid = out["run"]["run_id"]
    e = _journal(td)[rid]
    assert e["status"] == "failed" and e["diagnosis"] == f"port {port} already in use"
    runs = {x["run_id"]: x for x in json.loads(td("runs", "--demo", "--json").stdout)}
    assert runs[rid]["status"] == "failed" and runs[rid]["diagnosis"] == f"port {port} already in use"


def _wait_rc(run_dir: str, timeout: float = 60) -> None:
    rc = Path(run_dir) / "rc"
    end = time.monotonic() + timeout
    while not rc.exists():
        assert time.monotonic() < end, f"{rc} never written"
        time.sleep(0.2)


def test_served_then_crashed_run_reads_failed_with_its_cause_everywhere(td) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    r = td(
        "launch", "--demo", "--wait", "--json", "--timeout", "120", "--cmd", "tunedeck", "sim", "sglang",
        "--model-path", "Qwen/Qwen3-8B", "--tp-size", "2", "--port", str(port), "--sim-load-seconds", "2",
        "--sim-fault", "crash", "--sim-crash-after", "4",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    rid, run_dir = out["run"]["run_id"], out["run"]["run_dir"]
    assert out["run"]["status"] == "ready" and _journal(td)[rid]["status"] == "ready"

    # it crashes with nothing following it; the next `runs` re-reads its process and its log
    _wait_rc(run_dir)
    cause = "RuntimeError: CUDA error: an illegal memory access was encountered"
    r = td("runs", "--demo")
    assert r.returncode == 0, r.stderr
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith(rid))
    assert row.split()[1] == "failed", r.stdout
    assert cause in r.stdout
    # what to do about it, in one line (a root exception of no known kind: where to read)
    tip = "advice: read the proving line and the lines above it: the root exception names the failing part"
    assert tip in r.stdout
    runs = {x["run_id"]: x for x in json.loads(td("runs", "--demo", "--json").stdout)}
    assert runs[rid]["status"] == "failed" and runs[rid]["diagnosis"] == cause
    assert runs[rid]["advice"] == tip.removeprefix("advice: ")
    assert runs[rid]["rc"] == 137 and "illegal memory access" in runs[rid]["proof"]

    # the journal: the correction is appended, the ready record is kept
    e = _journal(td)[rid]
    assert e["status"] == "failed" and e["diagnosis"] == cause and e["corrects"] == "ready"
    raw = [json.loads(x) for x in journal_path().read_text().splitlines()]
    assert [x["status"] for x in raw if x.get("id") == rid] == ["ready", "failed"]
    td("runs", "--demo")  # a second re-read corrects nothing more
    assert sum(1 for x in journal_path().read_text().splitlines() if json.loads(x).get("id") == rid) == 2

    r = td("logs", rid, "--demo", "--follow")
    assert r.returncode == 0 and cause in r.stdout
    assert f"run {rid} has ended (failed: {cause})" in r.stderr, r.stderr


def test_logs_follow_names_the_cause_when_the_followed_run_dies(td) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    r = td(
        "launch", "--demo", "--cmd", "tunedeck", "sim", "sglang", "--model-path", "Qwen/Qwen3-8B", "--tp-size",
        "2", "--port", str(port), "--sim-load-seconds", "1", "--sim-fault", "crash", "--sim-crash-after", "3",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rid = r.stdout.split("launched run ", 1)[1].split()[0]
    r = td("logs", rid, "--demo", "--follow")
    assert r.returncode == 0, r.stderr
    assert "The server is fired up and ready to roll!" in r.stdout
    assert f"run {rid} has exited with status 137; failed: RuntimeError: CUDA error: an illegal memory access" in (
        r.stderr
    ), r.stderr
