"""Regression tests for defects found in a review of the core."""

from __future__ import annotations

import functools

import pytest

from tests.clifix import run_cli
from tests.integration.test_bench_store import SAMPLE
from tests.sshd import SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)
from tunedeck.util.safety import UnsafeInput, check_argv, env_command

_cli = functools.partial(run_cli, timeout=20)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://127.0.0.1:0"])
def test_bench_url_with_out_of_range_port_is_rejected_at_once(url: str) -> None:
    r = _cli("bench", "--url", url, "--num-prompts", "1")
    assert r.returncode != 0
    assert "port" in r.stderr.lower() and url in r.stderr
    assert "waiting for" not in r.stdout + r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.timeout(60)
def test_bench_port_out_of_range_is_rejected_by_the_parser() -> None:
    r = _cli("bench", "--demo", "--port", "99999", "--num-prompts", "1")
    assert r.returncode == 2
    assert "--port" in r.stderr and "65535" in r.stderr


@pytest.mark.parametrize("prog", ["-i", "--help", "FOO=1", "LD_PRELOAD=/x.so"])
def test_program_name_that_env_would_misread_is_rejected(prog: str) -> None:
    with pytest.raises(UnsafeInput, match="command\\[0\\]"):
        check_argv([prog, "x"])
    with pytest.raises(UnsafeInput):
        env_command([prog, "x"], {"A": "1"})


def test_ordinary_arguments_may_start_with_dash_or_hold_equals() -> None:
    assert check_argv(["python3", "-m", "x", "--a=b"]) == ["python3", "-m", "x", "--a=b"]


def _stored_run(run_id: str) -> None:
    from tunedeck.bench import store

    w = store.RunWriter(run_id, {"model": "m", "params": {"endpoint": "completions"}})
    w.append(SAMPLE)
    w.append({**SAMPLE, "index": 1})
    w.close()


def test_export_failing_midway_leaves_the_previous_file_whole(tmp_path, monkeypatch) -> None:
    import csv

    from tunedeck.bench import store

    _stored_run("rexp")
    dest = tmp_path / "out"
    dest.write_text("previous export\n")

    def boom(*a, **k):
        raise RuntimeError("disk gone")

    monkeypatch.setattr(csv.DictWriter, "writerow", boom)
    with pytest.raises(RuntimeError):
        store.export_csv("rexp", dest)
    assert dest.read_text() == "previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.timeout(60)
def test_launch_env_that_changes_what_runs_needs_confirmation() -> None:
    r = _cli("launch", "--demo", "--env", "LD_PRELOAD=/tmp/x.so", "--cmd", "true")
    assert r.returncode != 0
    assert "LD_PRELOAD" in r.stderr and "--allow-dangerous-env" in r.stderr
    assert "launched run" not in r.stdout
    assert "Traceback" not in r.stderr


def test_log_parser_keeps_a_bounded_number_of_distinct_errors() -> None:
    from tunedeck.logparse import LogParser

    p = LogParser("vllm")
    for i in range(3000):
        p.feed_line(f"ERROR 02-27 14:33:48 EngineDeadError: request {i} failed")
    p.feed_line("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    st = p.state
    assert 0 < len(st.errors) <= 300
    assert st.status == "failed"
    assert st.failure is not None and st.failure.kind != "crash"  # a later, specific kind still counts


def test_log_parser_partial_line_buffer_is_bounded() -> None:
    from tunedeck.logparse import LogParser

    p = LogParser()
    chunk = "x" * 65536
    for _ in range(64):  # 4 MiB without a line break
        p.feed_text(chunk)
    assert len(p._buf) <= 1 << 20
    p.feed_text("\nINFO 02-27 14:33:48 [api_server.py:1] Starting vLLM API server on http://0.0.0.0:8000\n")
    assert p.state.lines >= 1


def test_percentile_follows_numpy_order_of_operations() -> None:
    from tunedeck.bench.metrics import percentile

    xs = [float(i) ** 2 for i in range(101)]
    # np.percentile(xs, 29): index (101 - 1) * 0.29 = 28.999999999999996, then lerp from the upper value
    assert percentile(xs, 29) == 841 - 57 * (1 - (100 * 0.29 - 28))
    assert percentile(xs, 29) != 841.0
    assert percentile([1.0, 2.0], 75) == 2.0 - 1.0 * (1 - 0.75)
    assert percentile([3.0], 99) == 3.0 and percentile(xs, 100) == 10000.0 and percentile(xs, 0) == 0.0


@pytest.mark.sshd
@pytest.mark.timeout(90)
def test_trust_with_a_pinned_fingerprint_refuses_any_other_key(sshd: SshdServer) -> None:
    from tunedeck.util.paths import known_hosts_file

    sshd.write_known_hosts("empty")

    cli = functools.partial(run_cli, env=sshd.client_env(), timeout=45)

    r = cli("trust", sshd.target(), "--fingerprint", "SHA256:AAAAnotthekey")
    assert r.returncode == 1 and "not the expected" in r.stderr, r
    assert not known_hosts_file().exists()
    r = cli("trust", sshd.target(), "--fingerprint", sshd.host_key_fingerprint, "--json")
    assert r.returncode == 0, r.stderr
    assert known_hosts_file().read_text() == sshd.host_key_line + "\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_sim_port_out_of_range_is_a_usage_error_not_a_traceback(engine: str) -> None:
    model = ["--model-path", "m"] if engine == "sglang" else ["serve", "m"]
    r = _cli("sim", engine, *model, "--port", "99999")
    assert r.returncode == 2, r
    assert "--port" in r.stderr and "99999" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.timeout(60)
def test_ab_with_an_invalid_profile_name_records_nothing() -> None:
    r = _cli("ab", "../x", "sglang-base", "--demo")
    assert r.returncode == 2, r
    assert "invalid profile name '../x'" in r.stderr
    assert "journal:" not in r.stdout
    r = _cli("journal", "list", "--json")
    assert "../x" not in r.stdout
