"""The host-side runtime: one reproducible zipapp that runs on the oldest Python here, ships
itself, and runs benchmarks and A/Bs detached on the host (the demo host here; over a real
sshd in test_hostside_ssh.py)."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.clifix import bench_load, cli_json, run_cli, start_cli
from tests.hostfix import fake_python, pythons
from tests.screenapp import ScreenApp
from tests.simfix import free_port, sim_ttft_ms, vllm_sim
from tests.simfix_ab import ab_profiles
from tests.waits import until
from tunedeck.hostops.localhost import LocalHost
from tunedeck.services import runtime

pytestmark = pytest.mark.timeout(240)


def test_zipapp_is_reproducible_and_named_by_its_content(tmp_path):
    a = runtime.build(tmp_path / "a")
    b = runtime.build(tmp_path / "b")
    assert a.sha256 == b.sha256 and a.path.read_bytes() == b.path.read_bytes()
    assert a.path.name == f"tunedeck-host-{a.sha256[:16]}.pyz"
    import zipfile

    names = set(zipfile.ZipFile(a.path).namelist())
    assert "__main__.py" in names and "tunedeck/hostside/__main__.py" in names and "tunedeck/bench/runner.py" in names
    # one package, named as installed; the simulator travels (`sim ENGINE …`, `smi …`); nothing of the UI,
    # the SSH client or the demo host
    assert {n.split("/")[0] for n in names} == {"__main__.py", "tunedeck"}
    assert "tunedeck/sim/engine.py" in names and "tunedeck/sim/smi.py" in names and "tunedeck/sim/entry.py" in names
    assert "tunedeck/sim/demo.py" not in names
    # the releases' flag tables travel as data files (the simulator and the profile checks read them)
    assert {"tunedeck/engine_flags/sglang-0.5.23.txt", "tunedeck/engine_flags/vllm-0.33.0.txt"} <= names
    assert not any(n.startswith(("tunedeck/ui/", "tunedeck/widgets/")) or n.endswith("ssh.py") for n in names)


def test_a_build_of_the_same_sources_is_found_again_and_a_changed_or_damaged_one_is_made_anew(tmp_path, monkeypatch):
    first = runtime.build(tmp_path)
    zipped = []
    real = runtime.zipapp.create_archive
    monkeypatch.setattr(runtime.zipapp, "create_archive", lambda *a, **k: (zipped.append(1), real(*a, **k))[1])
    assert runtime.build(tmp_path) == first and zipped == []  # found by its sources' hash
    first.path.write_bytes(b"torn")
    assert runtime.build(tmp_path) == first and zipped == [1]  # not whole: built again, in place
    assert hashlib.sha256(first.path.read_bytes()).hexdigest() == first.sha256
    (index,) = tmp_path.glob(".sources-*")
    index.write_text("not a sha256\n")
    assert runtime.build(tmp_path) == first and zipped == [1, 1]  # a record that names nothing: built again
    first.path.unlink()
    assert runtime.build(tmp_path) == first and zipped == [1, 1, 1] and first.path.is_file()  # the archive gone
    monkeypatch.setattr(runtime, "_BOOT", runtime._BOOT + "# another boot script\n")
    changed = runtime.build(tmp_path)
    assert changed.sha256 != first.sha256 and zipped == [1, 1, 1, 1] and first.path.is_file()


def test_a_state_folder_that_cannot_be_written_still_serves_its_archive_and_is_named_when_it_must(
    tmp_path, monkeypatch
):
    first = runtime.build(tmp_path)
    for index in tmp_path.glob(".sources-*"):
        index.unlink()  # as an older tunedeck left it: the archive, no record of its build

    def refuse(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(runtime, "atomic_write_text", refuse)
    monkeypatch.setattr(runtime, "atomic_write_bytes", refuse)
    assert runtime.build(tmp_path) == first  # built, found whole in place: only the record is not written
    first.path.unlink()
    with pytest.raises(runtime.RuntimeUnavailable) as info:
        runtime.build(tmp_path)
    assert str(info.value) == f"the host runtime cannot be written: {first.path}: Read-only file system"


def test_every_module_imports_under_the_oldest_python_with_the_stdlib_only(tmp_path):
    found = pythons()
    assert found, "no CPython >= 3.9 found on this machine"
    (ver, py) = found[0]
    pyz = runtime.build(tmp_path).path
    mods = runtime.runtime_modules()
    code = (
        "import importlib, sys\nsys.path.insert(0, sys.argv[1])\n"
        + "".join(f"importlib.import_module({m!r})\n" for m in mods)
        + "print('ok', sys.version_info[:2])"
    )
    # -I: no user site, no PYTHONPATH; -S: no site-packages at all, so nothing but the stdlib
    r = subprocess.run([py, "-I", "-S", "-c", code, str(pyz)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "ok" in r.stdout, f"Python {ver} ({py}):\n{r.stderr[-3000:]}"
    info = subprocess.run([py, "-I", str(pyz), "info"], capture_output=True, text=True, timeout=60)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["python"].startswith("%d.%d." % ver)


def test_the_simulator_serves_from_the_archive_under_the_oldest_python(tmp_path):
    """`sim ENGINE …` and `smi …` from the archive alone: its GPUs are ${TUNEDECK_HOME}/sim's."""
    (_, py) = pythons()[0]
    pyz = str(runtime.build(tmp_path / "lib").path)
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin:/bin", "TUNEDECK_HOME": str(home), "TUNEDECK_SIM_LOAD_S": "0.5"}
    port = free_port()
    smi = [py, "-I", pyz, "smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
    proc = subprocess.Popen(
        [py, "-I", pyz, "sim", "sglang", "--model-path", "Qwen/Qwen3-8B", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    try:
        import urllib.request

        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the archive's simulator never became healthy"
                time.sleep(0.2)
        used = subprocess.run(smi, capture_output=True, text=True, env=env, timeout=60).stdout
        assert used.splitlines()[0].split(", ")[0] == "0" and int(used.splitlines()[0].split(", ")[1]) > 0, used
        assert (home / "sim" / "servers").is_dir()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    bad = subprocess.run([py, "-I", pyz, "sim", "llamacpp"], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "'sim llamacpp': not a simulator command" in bad.stderr


def test_vermin_confirms_python_3_9_for_every_shipped_module():
    files = [str(p) for name, p in runtime.source_files() if name.endswith(".py")]
    vermin = Path(sys.executable).parent / "vermin"
    r = subprocess.run(
        [str(vermin), "-t=3.9-", "--violations", "--no-tips", "--eval-annotations", *files],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_an_old_python_gets_one_clear_line(tmp_path):
    import glob

    old = sorted(glob.glob("/root/.pyenv/versions/3.[5-8].*/bin/python3.[5-8]") + glob.glob("/usr/bin/python3.[5-8]"))
    if not old:
        pytest.skip("no Python older than 3.9 on this machine (the fake-python cases below still run)")
    pyz = runtime.build(tmp_path).path
    for py in old:
        r = subprocess.run([py, "-I", str(pyz), "info"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 70 and r.stderr.count("\n") == 1 and "too old" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "script,why",
    [
        ("echo 3.8.10\n", "is Python 3.8.10"),
        ('echo "Segmentation fault" >&2; exit 139\n', "does not run"),
    ],
)
async def test_a_host_without_a_usable_python_names_the_way_out(tmp_path, script, why):
    fake = fake_python(tmp_path / "bin", script)
    host = LocalHost(env_overlay={"PATH": f"{fake.parent}:/usr/bin:/bin"})
    with pytest.raises(runtime.RuntimeUnavailable) as ei:
        await runtime.ensure(host)
    msg = str(ei.value)
    assert why in msg and "--client-where local" in msg and "\n" not in msg


async def test_a_named_python_that_is_missing_is_an_error_not_replaced_by_python3(tmp_path):
    """--python (or a profile's python) names the interpreter: when it cannot run, the error says
    so; python3 on PATH, which works here, is not used in its place."""
    with pytest.raises(runtime.RuntimeUnavailable) as ei:
        await runtime.ensure(LocalHost(), python=str(tmp_path / "no-such-python"))
    msg = str(ei.value)
    assert f"{tmp_path / 'no-such-python'}: not found" in msg and "\n" not in msg, msg
    assert (await runtime.ensure(LocalHost())).python_version  # python3 itself is fine


async def test_the_default_python3_runs_as_it_names_itself_and_a_named_one_as_named(tmp_path):
    """A ``python3`` that is a wrapper (pyenv's and asdf's shims are: ~0.1 s of shell a start, the
    version picked per directory) is asked once for its version; the jobs then run the interpreter
    it names itself by (``sys.executable``). A Python the operator named is used as named."""
    starts = tmp_path / "starts"
    wrapper = tmp_path / "bin" / "python3"
    wrapper.parent.mkdir()
    wrapper.write_text(
        f'#!/bin/sh\necho start >> {shlex.quote(str(starts))}\nexec {shlex.quote(sys.executable)} "$@"\n'
    )
    wrapper.chmod(0o755)
    host = LocalHost(env_overlay={"PATH": f"{wrapper.parent}:/usr/bin:/bin"})
    rt = await runtime.ensure(host)
    assert rt.python == sys.executable, rt.python
    assert starts.read_text().count("start") == 1  # the version check alone
    r = await host.run([rt.python, "-I", rt.archive, "info"], timeout=60)
    assert r.exit_status == 0 and starts.read_text().count("start") == 1, r.stderr
    assert (await runtime.ensure(host, python="python3")).python == sys.executable  # a profile's default
    assert (await runtime.ensure(host, python=str(wrapper))).python == str(wrapper)


async def test_a_python3_whose_own_path_does_not_run_alone_is_run_as_found(tmp_path):
    """A wrapper that sets what the interpreter needs (an environment variable here) names a path
    that does not run without it: the jobs run the wrapper, not a path that fails on the host."""
    real = os.path.realpath(sys.executable)
    inner = tmp_path / "inner" / "python"
    inner.parent.mkdir()
    inner.write_text(f'#!/bin/sh\n[ -n "$WRAPPED" ] || exit 1\nexec {shlex.quote(real)} "$@"\n')
    inner.chmod(0o755)
    wrapper = tmp_path / "bin" / "python3"
    wrapper.parent.mkdir()
    # bash's exec -a: the interpreter names itself by the inner path (sys.executable), as a wrapper's would
    wrapper.write_text(f'#!/bin/bash\nexport WRAPPED=1\nexec -a {shlex.quote(str(inner))} {shlex.quote(real)} "$@"\n')
    wrapper.chmod(0o755)
    host = LocalHost(env_overlay={"PATH": f"{wrapper.parent}:/usr/bin:/bin"})
    r = await host.run([str(wrapper), "-c", "import sys; print(sys.executable)"], timeout=30)
    assert r.stdout.strip() == str(inner), r.stdout + r.stderr  # the case this test is about
    rt = await runtime.ensure(host)
    assert rt.python == str(wrapper)
    assert (await runtime.ensure(host, python="python3")).python == str(wrapper)  # a profile's default


async def test_ensure_ships_once_and_checks_the_hash(tmp_path):
    host = LocalHost()
    rt1 = await runtime.ensure(host)
    rt2 = await runtime.ensure(host)
    assert rt1.uploaded and not rt2.uploaded and rt1.archive == rt2.archive
    assert rt1.archive.startswith(os.environ["TUNEDECK_HOME"] + "/lib/")
    assert Path(rt1.archive).read_bytes() == runtime.build().path.read_bytes()
    assert [p.name for p in Path(rt1.archive).parent.iterdir()] == [Path(rt1.archive).name]  # no temp left


async def test_the_archive_is_built_and_read_off_the_event_loop(tmp_path, monkeypatch):
    """The first build in a process reads every shipped source and may zip them (tens of ms): the
    dashboard ships from its event loop, so the build and the read of the archive run in a thread."""
    loop_thread = threading.get_ident()
    seen: list[str] = []
    real_build, real_read = runtime.build, Path.read_bytes

    def build(*a: object, **kw: object) -> runtime.Payload:
        seen.append("build on the loop" if threading.get_ident() == loop_thread else "build")
        return real_build(*a, **kw)

    def read_bytes(self: Path) -> bytes:
        if self.suffix == ".pyz" and threading.get_ident() == loop_thread:
            seen.append(f"{self.name} read on the loop")
        return real_read(self)

    monkeypatch.setattr(runtime, "build", build)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    host = LocalHost()
    assert (await runtime.ensure(host)).uploaded
    assert (await runtime.describe(host))["shipped"] is True
    assert seen == ["build", "build"]


#: the simulated vLLM these tests benchmark (50 ms TTFT, 10 ms ITL); other test modules use it too
sim = vllm_sim


def test_bench_on_the_demo_host_runs_there_and_is_mirrored_here(tmp_path):
    from tunedeck.bench import store

    port = free_port()
    rec = tmp_path / "truth.jsonl"
    with sim(port, "--sim-record-timestamps", str(rec)):
        r = run_cli("bench", "--demo", "--port", str(port), *bench_load("1,8", 16, 16, warmup=None))
    assert r.returncode == 0, r.stderr[-3000:]
    sums = json.loads(r.stdout)
    assert [s["completed"] for s in sums] == [16, 16]
    job = r.stderr.split("job ", 1)[1].split()[0]
    for s in sums:
        assert s["client"]["where"] == "host"
        info = store.load_run(s["run_id"])  # mirrored into the local store, same layout
        assert info.summary and info.summary["completed"] == 16 and info.meta["client"]["where"] == "host"
        assert len(store.read_samples(s["run_id"])) == 16
        origin = json.loads((info.path / "origin.json").read_text())
        assert origin["job_id"] == job and origin["kind"] == "bench"
        # against the server's own record of each request: the client on the host adds its loopback
        # and its loop's lag to the fixed 50 ms, never a tunnel's round trips
        truth = sim_ttft_ms(rec, info.meta["bench_start_wall"], 16)
        assert truth >= 45, truth
        assert -5 < s["mean_ttft_ms"] - truth < 40, (s["mean_ttft_ms"], truth)
    # the job ran under ${TUNEDECK_HOME} and left its folder there
    jd = Path(os.environ["TUNEDECK_HOME"]) / "bench" / job
    assert (jd / "rc").read_text().strip() == "0" and (jd / "events.jsonl").exists()
    lst = run_cli("results", "list")
    assert sums[0]["run_id"] in lst.stdout
    # attaching to the finished job: says so, mirrors again (idempotent), exit 0
    again = run_cli("bench", "--demo", "--attach", job, "--json", "-")
    assert again.returncode == 0 and "has ended" in again.stderr
    assert [s["run_id"] for s in json.loads(again.stdout)] == [s["run_id"] for s in sums]
    assert len(store.read_samples(sums[0]["run_id"])) == 16  # nothing appended twice


def test_bench_attach_and_stop_name_an_unknown_id_in_one_line():
    for flag in ("--attach", "--stop"):
        r = run_cli("bench", "--demo", flag, "0123456789ab")
        assert r.returncode == 1 and "no bench job '0123456789ab'" in r.stderr, r.stderr
        assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    r = run_cli("bench", "--demo", "--attach", "../../etc")
    assert r.returncode == 1 and "Traceback" not in r.stderr


def test_client_where_local_is_marked_as_measured_through_a_tunnel():
    port = free_port()
    with sim(port):
        opts = ("--client-where", "local", "--num-prompts", "4", "--output-len", "8", "--input-len", "8")
        s = cli_json("bench", "--demo", "--port", str(port), *opts, "--json", "-")
    assert s["client"]["where"] == "local-via-ssh"
    lst = run_cli("results", "show", s["run_id"])
    assert "measured through an SSH tunnel" in lst.stdout + lst.stderr


def test_stop_keeps_the_finished_samples(tmp_path):
    from tunedeck.bench import store

    port = free_port()
    with sim(port):
        p = start_cli("bench", "--demo", "--port", str(port), *bench_load(2, 400, 50, warmup=None))
        assert p.stderr is not None
        line = p.stderr.readline()
        job = line.split("job ", 1)[1].split()[0]
        folder = Path(os.environ["TUNEDECK_HOME"]) / "bench" / job / "data" / "results"

        def some_samples() -> bool:  # stop mid-run: after some samples were written, however slow the machine
            return any(f.stat().st_size > 0 for f in folder.glob("*/samples.jsonl"))

        until(some_samples, 60, what=f"the first samples of job {job}")
        r = run_cli("bench", "--demo", "--stop", job)
        assert r.returncode == 0 and f"bench job {job} stopped" in r.stderr, r.stderr
        out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    s = json.loads(out)
    assert s["partial"] and 0 < s["completed"] < 400
    assert len(store.read_samples(s["run_id"])) >= s["completed"]


def test_a_full_disk_on_the_host_stops_the_bench_with_a_clear_error_and_keeps_samples(tmp_path):
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the full-disk test needs root to mount a small tmpfs")
        pytest.skip("needs root to mount a small tmpfs as the host's TUNEDECK_HOME")
    from tunedeck.bench import store

    home = tmp_path / "small-home"
    home.mkdir()
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(home)], capture_output=True, text=True)
    if m.returncode != 0:
        why = f"cannot mount a 1 MB tmpfs as the host's full disk: {m.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    try:
        env = dict(os.environ, TUNEDECK_HOME=str(home))
        port = free_port()
        with sim(port):
            # the runtime (~110 kB) and a spec fit; ~1 kB per sample fills the rest within the run
            r = run_cli(
                "bench", "--demo", "--port", str(port), *bench_load(16, 3000, 64, warmup=None), env=env, timeout=200
            )
        assert r.returncode == 4, r.stderr[-3000:]
        last = r.stderr.strip().splitlines()[-1]
        assert "disk is full" in last and "samples written so far are kept" in last, r.stderr[-2000:]
        runs = store.list_runs()
        assert runs and len(store.read_samples(runs[-1].run_id)) > 0
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)


def test_two_ab_campaigns_on_one_host_are_refused(tmp_path, monkeypatch):
    user = tmp_path / "profiles"
    ab_profiles(user, "h", free_port())
    monkeypatch.setenv("TUNEDECK_PROFILES", str(user))
    monkeypatch.setenv("TUNEDECK_SIM_LOAD_S", "60")
    first = start_cli("ab", "h-base", "h-tuned", "--demo", "--plan", "quick", "--yes")
    assert first.stderr is not None
    line = first.stderr.readline()
    job = line.split("A/B job ", 1)[1].split()[0]
    try:
        second = run_cli("ab", "h-base", "h-tuned", "--demo", "--plan", "quick", "--yes")
        assert second.returncode == 1 and f"A/B {job} is running there" in second.stderr, second.stderr
        assert "--attach" in second.stderr and "Traceback" not in second.stderr
    finally:
        first.terminate()  # detaches only
        first.communicate(timeout=30)
        c = run_cli("ab", "--cancel", job, "--demo", "--yes", "--quiet", timeout=240)
    assert c.returncode == 130, c.stderr[-2000:]
    assert "cancelled" in c.stderr

    async def alive() -> list:
        from tunedeck.hostops import launcher
        from tunedeck.sim.demo import demo_host

        return [h for h in await launcher.list_host_runs(demo_host()) if h.alive]

    assert asyncio.run(alive()) == []


async def test_compare_screen_reattaches_to_a_campaign_running_on_the_host():
    """A campaign started earlier (elsewhere) is followed when the Compare screen opens."""

    from tests.abfakes import FakeOps
    from tunedeck.ab.events import ABEvent
    from tunedeck.ab.plans import load_plan
    from tunedeck.ab.runner import ABRunner
    from tunedeck.hostops import launcher, runstop, runstore
    from tunedeck.ui.screens.compare import CompareScreen
    from tunedeck.widgets.compare_table import CompareTable

    host = LocalHost()
    rep = await ABRunner(FakeOps(), "base", "tuned", load_plan("quick")).run()
    jid = runstore.new_run_id()
    meta = {"kind": "ab", "ab_id": rep.id}
    started = await launcher.start_detached(host, launcher.launch_script("ab", jid, ["sleep", "60"], {}, meta))
    assert started.pid is not None
    jd = Path(started.run_dir)
    (jd / "report.json").write_text(json.dumps(rep.to_dict()))
    evs = [
        ABEvent("start", "A/B started", step=0, steps=8),
        ABEvent("done", f"A/B {rep.id} completed", step=8, steps=8),
    ]
    (jd / "events.jsonl").write_text(
        "".join(json.dumps(e.to_json()) + "\n" for e in evs)
        + json.dumps({"type": "exit", "rc": 0, "error": None})
        + "\n"
    )

    scr = CompareScreen(profiles=["base", "tuned"])
    try:
        async with ScreenApp(scr, host=host, target="local").run_test(size=(120, 40)) as pilot:
            for _ in range(200):
                await pilot.pause(0.1)
                if scr.report is not None:
                    break
            assert scr.report is not None and scr.report.id == rep.id
            assert scr.query_one(CompareTable).get_cell("peak_output_tok_s", "verdict").plain == "B +18%"
    finally:
        await runstop.signal_folder(host, str(jd), jid, 2)


async def test_tune_screen_reattaches_to_a_campaign_running_on_the_host():
    """A tuning campaign started earlier (elsewhere) is followed when the Tune screen opens: its
    candidates from the job's spec, their states from its events, the winner from its report."""

    from tests.waits import until_async
    from tunedeck.ab.events import ABEvent
    from tunedeck.hostops import launcher, runstop, runstore
    from tunedeck.ui.screens.tune import TuneScreen
    from tunedeck.widgets.tune_table import TuneTable

    host = LocalHost()
    a, b = "sglang-base", "sglang-base+attention-backend=fa3"
    jid = runstore.new_run_id()
    meta = {"kind": "tune", "campaign": "tune-reattach-1"}
    started = await launcher.start_detached(host, launcher.launch_script("tune", jid, ["sleep", "60"], {}, meta))
    assert started.pid is not None
    jd = Path(started.run_dir)
    spec = {"campaign": "tune-reattach-1", "candidates": [{"name": a, "tp": 8}, {"name": b, "tp": 8}]}
    (jd / "spec.json").write_text(json.dumps(spec))
    result = {"capacity": 16, "throughput_at_capacity": 800.0}
    evs = [
        ABEvent("launch", f"{a}: launch", a),
        ABEvent("ready", f"{a}: ready", a, data={"startup_s": 3.0}),
        ABEvent("capacity", f"{a}: capacity", a, data={"capacity": 16, "result": result}),
        ABEvent("launch", f"{b}: launch", b),
        ABEvent("failed", f"{b}: failed", b),
    ]
    report = {
        "campaign": "tune-reattach-1",
        "status": "completed",
        "winner": a,
        "candidates": [
            {"name": a, "state": "measured", "capacity": 16, "tok_s_per_user": 50.0, "tok_s_per_gpu": 100.0},
            {"name": b, "state": "failed"},
        ],
    }
    (jd / "report.json").write_text(json.dumps(report))
    (jd / "events.jsonl").write_text(
        "".join(json.dumps(e.to_json()) + "\n" for e in evs) + json.dumps({"type": "exit", "rc": 0}) + "\n"
    )

    scr = TuneScreen(profiles=[a])
    try:
        async with ScreenApp(scr, host=host, target="local").run_test(size=(140, 44)) as pilot:
            status = scr.query_one("#tune-status")
            await until_async(
                lambda: f"winner: {a}" in str(status.render()), 60, pilot=pilot, what=lambda: str(status.render())
            )
            table = scr.query_one(TuneTable)
            assert [str(table.get_cell(n, "state")) for n in (a, b)] == ["done", "failed"]
            assert str(table.get_cell(a, "capacity")) == "16" and scr.campaign is None
            assert "campaign tune-reattach-1" in str(status.render())
    finally:
        await runstop.signal_folder(host, str(jd), jid, 2)
