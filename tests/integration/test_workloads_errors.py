"""Bad workload input: `tunedeck bench` exits non-zero with one line naming the file and the line or
record; nothing is sent (a loopback listener stands in for the server) and no result is stored."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.conftest import tunedeck_cmd
from tunedeck.services import runtime


def _lines(rows: list[object]) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


GOOD_TURNS = [{"from": "human", "value": "what is a prefix cache?"}, {"from": "gpt", "value": "a cache of prefixes."}]

CASES = {
    "missing-file": ("sharegpt", None, [], "{f}: no such file"),
    "sharegpt-record": (
        "sharegpt",
        json.dumps([{"id": "a", "conversations": GOOD_TURNS}, {"id": "b", "conversations": "oops"}]),
        [],
        "{f}: record 1 (id 'b'): expected an object with a 'conversations' list",
    ),
    "sharegpt-json": ("sharegpt", '[\n {"id": "a",\n  "conversations": [}\n]', [], "{f}:3: not valid JSON"),
    "custom-line": (
        "custom",
        _lines([{"prompt": "a b c", "output_len": 4}, "{not json"]),
        [],
        "{f}:2: not valid JSON",
    ),
    "custom-output-len": (
        "custom",
        _lines([{"prompt": "a b c", "output_len": 4}, {"prompt": "d e", "output_len": "many"}]),
        [],
        "{f}:2: 'output_len' 'many' is not a whole number >= 1",
    ),
    "custom-empty": ("custom", "\n\n", [], "{f}: no request left to send"),
    "custom-empty-file": ("custom", "", [], "{f}: the file is empty (0 bytes); expected a custom file"),
    "sharegpt-empty-file": ("sharegpt", "", [], "{f}: the file is empty (0 bytes); expected a sharegpt file"),
    "mooncake-record": (
        "mooncake",
        _lines([{"timestamp": 0, "input_length": 10, "output_length": 2}, {"timestamp": 5, "output_length": 2}]),
        [],
        "{f}:2: 'input_length' None is not a whole number >= 1",
    ),
    "mooncake-backwards": (
        "mooncake",
        _lines(
            [
                {"timestamp": 100, "input_length": 10, "output_length": 2, "hash_ids": [1]},
                {"timestamp": 200, "input_length": 10, "output_length": 2, "hash_ids": [1]},
                {"timestamp": 150, "input_length": 10, "output_length": 2, "hash_ids": [1]},
            ]
        ),
        [],
        "{f}:3: timestamp 150 ms is before the previous row's 200 ms",
    ),
    "burstgpt-backwards": (
        "burstgpt",
        "Timestamp,Request tokens,Response tokens\n5,10,3\n4,10,3\n",
        [],
        "{f}:3: Timestamp 4 s is before the previous row's 5 s",
    ),
    "burstgpt-column": (
        "burstgpt",
        "Timestamp,Request tokens\n5,10\n",
        [],
        "{f}:1: no column 'Response tokens' in the header",
    ),
    "burstgpt-all-failed": (
        "burstgpt",
        "Timestamp,Request tokens,Response tokens\n1,10,0\n2,10,0\n",
        [],
        "{f}: no request left to send (skipped zero_response_tokens: 2)",
    ),
    "all-over-context": (
        "custom",
        _lines([{"prompt": "x" * 400, "output_len": 4}]),
        ["--context-limit", "50"],
        "{f}: no request left to send (skipped over_context_limit: 1)",
    ),
    "option-of-another-source": (
        "random",
        None,
        ["--gsp-num-groups", "4"],
        "--gsp-num-groups applies to --dataset-name shared_prefix, not random",
    ),
    "file-for-random": ("random", "", [], "--dataset-name random reads no file; drop --dataset-path {f}"),
}


@pytest.fixture
def listener():
    """A loopback port where the server would be: it must see no connection."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    s.setblocking(False)
    yield s
    s.close()


def _no_connection(s: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        conn, _ = s.accept()
        conn.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_workload_is_one_line_and_nothing_is_sent(tmp_path, listener, case):
    name, content, extra, want = CASES[case]
    f = tmp_path / f"data-{case}"
    if content is not None:
        f.write_text(content)
    args = ["--dataset-name", name, *extra]
    if content is not None or name != "random":
        args += ["--dataset-path", str(f)]
    port = listener.getsockname()[1]
    r = subprocess.run(
        [*tunedeck_cmd(), "bench", "--url", f"http://127.0.0.1:{port}", "--ready-timeout", "2", *args],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("tunedeck bench: " + want.format(f=f)), lines[0]
    _no_connection(listener)
    results = Path(os.environ["XDG_DATA_HOME"]) / "tunedeck" / "results"
    assert not results.exists() or not any(results.iterdir())


@pytest.mark.timeout(120)
def test_host_run_refuses_a_bad_trace_before_starting_a_job(tmp_path, listener):
    f = tmp_path / "t.jsonl"
    f.write_text(
        _lines(
            [
                {"timestamp": 9, "input_length": 10, "output_length": 2},
                {"timestamp": 1, "input_length": 10, "output_length": 2},
            ]
        )
    )
    port = listener.getsockname()[1]
    r = subprocess.run(
        [
            *tunedeck_cmd(),
            "bench",
            "--demo",
            "--port",
            str(port),
            "--dataset-name",
            "mooncake",
            "--dataset-path",
            str(f),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"tunedeck bench: {f}:2: timestamp 1 ms is before the previous row's 9 ms"
    _no_connection(listener)
    assert not (Path(os.environ["TUNEDECK_HOME"]) / "bench").exists()  # no job was started


async def test_a_data_file_is_placed_on_the_host_once_per_content(tmp_path):
    from tunedeck.hostops.localhost import LocalHost

    host = LocalHost()
    data = b'{"prompt": "x", "output_len": 2}\n'
    first = await runtime.ensure_data(host, data)
    home = Path(os.environ["TUNEDECK_HOME"])
    import hashlib

    assert first == f"{home}/data/{hashlib.sha256(data).hexdigest()}"
    assert Path(first).read_bytes() == data
    mtime = Path(first).stat().st_mtime_ns
    assert await runtime.ensure_data(host, data) == first  # already there: not written again
    assert Path(first).stat().st_mtime_ns == mtime
    assert not [p for p in (home / "data").iterdir() if p.name.startswith(".")]  # no staged leftovers


def _cfg(*argv: str):
    from tunedeck.commands.bench import parse_plan, plan_config

    plan = parse_plan(["--url", "http://127.0.0.1:9", *argv])
    return plan_config(plan, "http://127.0.0.1:9")


def test_vllm_option_names_reach_the_config(tmp_path):
    cfg = _cfg("--random-input-len", "64", "--random-output-len", "9", "--random-range-ratio", "0.5")
    assert (cfg.input_len, cfg.output_len, cfg.ignore_eos) == (64, 9, True)
    assert cfg.workload.name == "random" and cfg.workload.params == {"range_ratio": 0.5}
    assert cfg.workload_spec().params == {"input_len": 64, "output_len": 9, "range_ratio": 0.5}
    f = tmp_path / "sg.json"
    f.write_text(json.dumps([{"conversations": GOOD_TURNS}]))
    sg = _cfg("--dataset-name", "sharegpt", "--dataset-path", str(f), "--sharegpt-output-len", "5")
    assert sg.ignore_eos is False and sg.workload.path == str(f) and sg.workload.params == {"output_len": 5}
    assert _cfg("--dataset-name", "sharegpt", "--dataset-path", str(f), "--ignore-eos").ignore_eos is True
    trace = tmp_path / "t.csv"
    trace.write_text("Timestamp,Request tokens,Response tokens\n0,5,5\n")
    bg = _cfg("--dataset-name", "burstgpt", "--dataset-path", str(trace), "--trace-speed", "4")
    assert bg.workload.params == {"trace_speed": 4.0} and bg.ignore_eos is True
    with pytest.raises(ValueError, match="--input-len does not apply to --dataset-name burstgpt"):
        _cfg("--dataset-name", "burstgpt", "--dataset-path", str(trace), "--input-len", "5")
