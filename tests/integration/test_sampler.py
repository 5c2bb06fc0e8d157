"""The host sampler: one process per host and dashboard, JSON lines on one channel.

Locally (real processes: the sampler, the simulated nvidia-smi, a simulated SGLang
server) and over a real sshd: the dashboard's three sources share one sampler and one
SSH connection, start no process on the host once running, fall back to per-command
polling on a host without a usable Python, and a ``kill -9`` of the laptop leaves no
sampler behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.conftest import REPO
from tests.hostfix import fake_python
from tests.integration.test_ab_ssh import remote_shims
from tests.simfix import free_port, sglang_sim
from tests.sshd import ROOT_USER, SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.sshfix import quick_host
from tunedeck.collectors.sampled import SampledGpu, sampled_sources
from tunedeck.hostops.localhost import LocalHost
from tunedeck.hostside import hostread

pytestmark = pytest.mark.timeout(180)


def _starttime(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def _run_folder(d: Path, files: dict[str, str]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)


@contextlib.contextmanager
def _live_run(home: Path, port: int) -> Iterator[None]:
    """The run folder ``HOME/runs/r1`` of the sglang profile s1 on ``port``, its wrapper pid alive."""
    keeper = subprocess.Popen(["sleep", "600"])
    meta = json.dumps({"port": port, "engine": "sglang", "profile": "s1"})
    try:
        files = {"run.sh": "true\n", "pid": f"{keeper.pid}\n", "starttime": _starttime(keeper.pid) + "\n"}
        _run_folder(home / "runs" / "r1", {**files, "log": "", "meta.json": meta})
        yield
    finally:
        keeper.kill()
        keeper.wait()


@pytest.fixture
def live_run(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A run folder under HOME/runs whose wrapper pid is alive, for a server on a free port."""
    home = tmp_path / "home"
    port = free_port()
    with _live_run(home, port):
        yield home, port


def _shims(tmp_path: Path) -> Path:
    from tunedeck.sim.demo import write_shims

    return write_shims(tmp_path / "shims") / "nvidia-smi"


def _alive(pid: int, st: str) -> bool:
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return rest[0] not in ("Z", "X") and rest[19] == st


def _children(pid: int) -> set[tuple[int, str]]:
    """(pid, start time) of every process below ``pid``."""
    from tests.sshd import _descendants

    out = set()
    for p in _descendants(pid):
        try:
            out.add((p, _starttime(p)))
        except OSError:
            pass
    return out


def _sampler(home: Path, *opts: str, **popen: Any) -> subprocess.Popen:
    """The host sampler (``python -m tunedeck.hostside sample``) for ``home``, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "tunedeck.hostside", "sample", "--home", str(home), *opts],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **popen,
    )


def _read_lines(proc: subprocess.Popen, until: float, want: set[str]) -> dict[str, list[dict]]:
    got: dict[str, list[dict]] = {}
    assert proc.stdout is not None
    while time.monotonic() < until and not want <= set(got):
        line = proc.stdout.readline()
        if not line:
            break
        msg = json.loads(line)
        got.setdefault(msg["t"], []).append(msg)
    return got


def test_sampler_streams_gpus_host_runs_and_servers_and_starts_nothing_once_running(tmp_path, live_run):
    home, port = live_run
    smi = _shims(tmp_path)
    with sglang_sim(port) as server:
        server.wait_ready()
        proc = _sampler(home, "--smi", str(smi), "--interval", "0.5", "--apps-interval", "1", text=True)
        try:
            got = _read_lines(proc, time.monotonic() + 60, {"hello", "gpu", "apps", "host", "runs", "server"})
            assert {"hello", "gpu", "apps", "host", "runs", "server"} <= set(got), (set(got), proc.stderr)
            assert len(got["gpu"][-1]["rows"]) == 8
            host = got["host"][-1]
            assert host["cpus"] >= 1 and host["mem_total"] > host["mem_used"] > 0 and len(host["cpu"]) == 2
            runs = next(m for m in got["runs"] if m["kind"] == "runs")["runs"]
            assert [(r["id"], r["alive"], r["meta"]["port"]) for r in runs] == [("r1", True, port)]
            srv = got["server"][-1]
            assert srv["port"] == port and srv["run_id"] == "r1" and srv["health"]["status"] == 200
            body = srv["metrics"]["body"]
            assert "sglang:num_running_reqs" in body and all(
                ln.startswith(("sglang:", "# HELP sglang:", "# TYPE sglang:")) for ln in body.splitlines()
            )
            # steady state: the same two nvidia-smi loops, nothing started since
            before = _children(proc.pid)
            _read_lines(proc, time.monotonic() + 4, {"never"})
            after = _children(proc.pid)
            assert before == after and before, (before, after)
        finally:
            proc.terminate()
            assert proc.wait(10) == 0
        assert not _children(proc.pid)


def test_sampler_ends_with_its_children_when_nobody_reads_it(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = _sampler(home, "--smi", str(_shims(tmp_path)), "--interval", "0.2")
    assert proc.stdout is not None and proc.stderr is not None
    assert b'"hello"' in proc.stdout.readline()
    deadline = time.monotonic() + 30
    while not _children(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    kids = _children(proc.pid)
    assert kids
    proc.stdout.close()  # the channel closed
    assert proc.wait(20) == 0
    assert b"stdout closed" in proc.stderr.read()
    time.sleep(1)
    assert not [p for p, st in kids if _alive(p, st)]


def test_a_host_without_nvidia_smi_gets_a_gpu_error_and_no_process(tmp_path):
    proc = _sampler(tmp_path, "--smi", "nvidia-smi-not-here", "--interval", "0.2", text=True)
    try:
        got = _read_lines(proc, time.monotonic() + 30, {"gpu_error", "host"})
        err = got["gpu_error"][0]
        assert err["status"] is None and "not found" in err["text"]
        from tunedeck.collectors.sampled import gpu_status

        assert gpu_status(err, None).state == "no-nvidia-smi"
        assert not _children(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("how", ["quiet", "closed"])
def test_with_a_heartbeat_the_sampler_ends_when_stdin_goes_quiet_or_closes(tmp_path, how):
    proc = _sampler(tmp_path, "--no-gpu", "--interval", "0.2", "--heartbeat", "2", stdin=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        assert b'"hello"' in proc.stdout.readline()
        for _ in range(8):  # beats keep it going past the limit
            proc.stdin.write(b"\n")
            proc.stdin.flush()
            time.sleep(0.5)
        assert proc.poll() is None
        if how == "closed":
            proc.stdin.close()
        while proc.stdout.read(65536):  # drain until it ends
            pass
        assert proc.wait(20) == 0
        err = proc.stderr.read().decode()
        assert ("stdin closed" if how == "closed" else "no heartbeat from the laptop") in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("bad", [["--interval", "0"], ["--keepalive", "-1"], ["--heartbeat", "0"]])
def test_a_bad_option_is_one_line(tmp_path, bad):
    r = subprocess.run(
        [sys.executable, "-m", "tunedeck.hostside", "sample", "--home", str(tmp_path), *bad],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and "must be positive" in r.stderr.splitlines()[-1]


async def test_a_host_without_python_falls_back_to_one_command_per_poll(tmp_path):
    shim = _shims(tmp_path)
    fake = fake_python(tmp_path / "bin", "echo 3.8.10\n")
    host = LocalHost(env_overlay={"PATH": f"{fake.parent}:{shim.parent}:/usr/bin:/bin"})
    host.is_local = False  # take the remote path: sampler first
    src = sampled_sources(host, interval=0.5)
    assert isinstance(src.gpu, SampledGpu)
    agen = src.gpu.stream()
    try:
        st = await asyncio.wait_for(agen.__anext__(), 60)
        assert st.state == "ok" and len(st.gpus) == 8
        assert src.gpu.sampler.state == "unavailable" and "3.8.10" in src.gpu.sampler.reason
        assert src.gpu.fallback is not None and src.gpu.fallback.starts == 1
    finally:
        await agen.aclose()
        await src.gpu.aclose()


# ---------------------------------------------------------------------- over sshd


def _sampler_procs(sshd: SshdServer) -> list[tuple[int, str]]:
    return [
        (p, c)
        for p, c in sshd.processes_matching(str(sshd.remote_home))
        if " sample --home " in c and "tunedeck-host-" in c and not c.startswith("sh ")
    ]


@pytest.mark.sshd
async def test_dashboard_sources_over_sshd_share_one_sampler_and_one_connection(sshd: SshdServer, tmp_path):
    remote_shims(sshd, tmp_path / "remote-sim")
    port = free_port()
    live = contextlib.ExitStack()
    live.enter_context(_live_run(sshd.remote_home, port))
    host = quick_host(sshd.target(ROOT_USER))
    src = sampled_sources(host, interval=0.5)
    agen = src.gpu.stream()
    try:
        with sglang_sim(port) as server:
            server.wait_ready()
            st = await asyncio.wait_for(agen.__anext__(), 90)
            while st.state != "ok":
                st = await asyncio.wait_for(agen.__anext__(), 30)
            assert len(st.gpus) == 8
            stats = await src.host.sample()
            assert stats.mem_total > 0 and stats.cpu_count >= 1
            servers = ()
            for _ in range(40):
                servers = await src.servers.sample()
                if servers and servers[0].state == "ready" and servers[0].running is not None:
                    break
                await asyncio.sleep(0.5)
            assert servers and servers[0].state == "ready" and servers[0].name == "s1", servers
            assert servers[0].metrics_state == "ok" and servers[0].model == "m"
            assert len(_sampler_procs(sshd)) == 1
            assert len(sshd.session_pids(ROOT_USER)) == 1  # one SSH connection for all three
            assert src.gpu.sampler.starts == 1
            # steady state on the host: nothing below the sessions is started any more
            from tests.sshd import _descendants

            assert sshd.proc is not None
            before = {p for p in _descendants(sshd.proc.pid)}
            for _ in range(6):
                await asyncio.wait_for(agen.__anext__(), 10)
            assert {p for p in _descendants(sshd.proc.pid)} == before
    finally:
        await agen.aclose()
        await src.gpu.aclose()
        await src.servers.aclose()
        await host.close()
        live.close()
    deadline = time.monotonic() + 20
    while _sampler_procs(sshd) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert not _sampler_procs(sshd)


_DASHBOARD = textwrap.dedent("""
    import asyncio, sys
    from tunedeck.collectors.sampled import sampled_sources
    from tunedeck.hostops.ssh import SshHost

    async def main():
        src = sampled_sources(SshHost(sys.argv[1]), interval=0.5)
        async for st in src.gpu.stream():
            if st.state == "ok":
                print("ok", flush=True)
    asyncio.run(main())
""")


@contextlib.contextmanager
def _laptop(sshd: SshdServer, code: str) -> Iterator[subprocess.Popen]:
    """A dashboard here: ``code`` run with the target of ``sshd``, given once it printed "ok" and its
    one sampler runs on the host; killed with SIGKILL at the end."""
    laptop = subprocess.Popen(
        [sys.executable, "-c", code, sshd.target(ROOT_USER)],
        cwd=REPO,
        env=sshd.client_env(PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert laptop.stdout is not None
        line = laptop.stdout.readline()
        assert line.strip() == "ok", laptop.stderr.read() if laptop.stderr else ""
        assert len(_sampler_procs(sshd)) == 1
        yield laptop
    finally:
        laptop.send_signal(signal.SIGKILL)
        laptop.wait()


@pytest.mark.sshd
@pytest.mark.slow
def test_kill_9_of_the_laptop_leaves_no_sampler_on_the_host(sshd: SshdServer, tmp_path):
    from tunedeck.hostops.ssh import SshOptions

    remote_shims(sshd, tmp_path / "remote-sim")
    with _laptop(sshd, _DASHBOARD):
        pass
    opts = SshOptions()
    window = opts.keepalive_interval * opts.keepalive_count_max
    deadline = time.monotonic() + window
    while _sampler_procs(sshd) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _sampler_procs(sshd), _sampler_procs(sshd)
    assert not [c for _, c in sshd.processes_matching(str(tmp_path / "remote-sim"))]  # its nvidia-smi too


@pytest.mark.sshd
@pytest.mark.slow
def test_a_frozen_laptop_leaves_no_sampler_after_the_keepalive_window(sshd: SshdServer, tmp_path):
    """SIGSTOP is a laptop that sleeps or a link that died without a word: no FIN, no RST,
    the TCP connection and the channel stay open on the host. Only the missing heartbeat tells."""
    remote_shims(sshd, tmp_path / "remote-sim")
    keepalive = 4.0
    code = textwrap.dedent(f"""
        import asyncio, sys
        from tunedeck.services.sampler import HostSampler
        from tunedeck.hostops.ssh import SshHost

        async def main():
            s = HostSampler(SshHost(sys.argv[1]), interval=0.5, keepalive={keepalive})
            s.start()
            while s.seq.get("gpu", 0) < 1:
                await s.wait_change(30)
            print("ok", flush=True)
            await asyncio.sleep(3600)
        asyncio.run(main())
    """)
    with _laptop(sshd, code) as laptop:
        time.sleep(2 * keepalive)  # heartbeats flow: a quiet but live laptop keeps its sampler
        assert len(_sampler_procs(sshd)) == 1
        laptop.send_signal(signal.SIGSTOP)
        frozen = time.monotonic()
        assert len(sshd.session_pids(ROOT_USER)) == 1  # the link is still up on the host's side
        while _sampler_procs(sshd) and time.monotonic() - frozen < keepalive + 10:
            time.sleep(0.25)
        assert not _sampler_procs(sshd), _sampler_procs(sshd)
        assert not [c for _, c in sshd.processes_matching(str(tmp_path / "remote-sim"))]  # its nvidia-smi too


async def test_a_sampler_at_the_end_of_its_lifetime_is_followed_by_the_next_without_a_gap(tmp_path):
    from tunedeck.services.sampler import HostSampler

    shim = _shims(tmp_path)
    host = LocalHost(env_overlay={"PATH": f"{shim.parent}:/usr/bin:/bin"})
    host.is_local = False
    s = HostSampler(host, interval=0.5, lifetime=2, smi=str(shim))
    states = []
    try:
        assert await s.wait_settled(60) == "running"
        deadline = time.monotonic() + 30
        while s.starts < 3 and time.monotonic() < deadline:
            await s.wait_change(1.0)
            states.append(s.state)
        assert s.starts >= 3 and s.seq.get("bye", 0) >= 2
        assert set(states) == {"running"}, states  # never "lost" in between
    finally:
        await s.aclose()


def test_ended_runs_are_read_once_live_ones_every_sample(tmp_path, live_run):
    home, port = live_run
    old = home / "runs" / "r0"
    meta = json.dumps({"port": 1, "profile": "old"})
    _run_folder(old, {"run.sh": "true\n", "pid": "999999999\n", "starttime": "1\n", "rc": "0\n", "meta.json": meta})
    cache: dict = {}
    first = hostread.list_runs(str(home / "runs"), cache)
    assert [(r["id"], r["alive"], r["rc"]) for r in first] == [("r0", False, 0), ("r1", True, None)]
    assert set(cache) == {"r0"}
    (old / "meta.json").write_text(json.dumps({"port": 1, "profile": "changed"}))
    (home / "runs" / "r1" / "meta.json").write_text(json.dumps({"port": port, "profile": "s1-renamed"}))
    second = {r["id"]: r for r in hostread.list_runs(str(home / "runs"), cache)}
    assert second["r0"]["meta"]["profile"] == "old"  # not read again
    assert second["r1"]["meta"]["profile"] == "s1-renamed"  # a live run is
    import shutil

    shutil.rmtree(old)
    assert [r["id"] for r in hostread.list_runs(str(home / "runs"), cache)] == ["r1"] and cache == {}
