"""The parser's general rules, one by one: encodings, unreadable input, provisional exceptions,
failures after ready, the new kinds and their advice, and what reaches the terminal.

The class logs themselves (two or more variants each) are checked row by row in
test_logparse_corpus.py; these tests pin the rules behind them on small inputs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tunedeck.logparse import ADVICE, LogParser, might_be_fatal, parse_text
from tunedeck.logparse.patterns import CLASSIFIER, classify

HANDMADE = Path(__file__).resolve().parents[1] / "data" / "logs" / "generalise"

SG_READY = "\n".join(
    [
        "[2026-03-02 16:00:01] server_args=ServerArgs(model_path='m', tp_size=1, port=30000)",
        "[2026-03-02 16:00:09 TP0] Load weight begin. avail mem=78.50 GB",
        "[2026-03-02 16:00:22 TP0] KV Cache is allocated. #tokens: 402123, K size: 27.60 GB, V size: 27.60 GB",
        "[2026-03-02 16:00:31] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        "[2026-03-02 16:00:33] The server is fired up and ready to roll!",
    ]
)


def _parse_bytes(data: bytes, step: int) -> LogParser:
    p = LogParser()
    for i in range(0, len(data), step):
        p.feed(data[i : i + step])
    p.finish()
    return p


# --------------------------------------------------------------------------- kinds and advice


def test_every_kind_has_advice_and_a_row_in_the_docs():
    kinds = {k for k, _, _ in CLASSIFIER}
    assert kinds == set(ADVICE)
    doc = (REPO / "docs" / "log-diagnosis.md").read_text(encoding="utf-8")
    for kind, advice in ADVICE.items():
        row = re.search(rf"^\| `{re.escape(kind)}` \|.*\| (.*) \|$", doc, re.MULTILINE)
        assert row is not None, f"docs/log-diagnosis.md has no row for {kind}"
        assert row.group(1) == advice, kind


@pytest.mark.parametrize(
    "text,kind",
    [
        (
            "[rank3]:[E1203 10:11:12.345 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600010 milliseconds",
            "nccl-timeout",
        ),
        (
            "[PG 0 Rank 1] Terminating the process after attempting to dump debug info, due to collective timeout",
            "nccl-timeout",
        ),
        (
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 804: forward compatibility was attempted on non supported HW",
            "cuda-driver",
        ),
        ("RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version", "cuda-driver"),
        ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040).", "cuda-driver"),
        ("requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/x", "hf-auth"),
        ("huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for url", "hf-auth"),
        (
            "OSError: m is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'",
            "hf-auth",
        ),
        (
            "ValueError: The repository for m contains custom code which must be executed to correctly load the model.",
            "remote-code",
        ),
        (
            "ValueError: Loading m requires you to execute the configuration file in that repo on your local machine.",
            "remote-code",
        ),
        ("OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/x'", "disk-full"),
        ("RuntimeError: IO Error: No space left on device (os error 28)", "disk-full"),
        ("[2026-03-02 09:04:13] main process disappeared, exiting", "crash"),
        ("terminate called after throwing an instance of 'std::runtime_error'", "crash"),
    ],
)
def test_new_kinds_by_their_wording(text, kind):
    assert might_be_fatal(text)
    c = classify(text)
    assert c is not None and c[0] == kind, c


def test_a_servers_arguments_naming_trust_remote_code_are_not_a_failure():
    st, _ = parse_text(
        "[2026-03-02 16:00:01] server_args=ServerArgs(model_path='m', trust_remote_code=True, port=30000)\n"
    )
    assert st.failure is None and st.status == "starting"


def test_hf_causes_say_which_refusal():
    assert "gated" in classify("huggingface_hub.errors.GatedRepoError: 401 Client Error.")[1]  # type: ignore[index]
    assert "not found" in classify("RepositoryNotFoundError: 404 Client Error.")[1]  # type: ignore[index]
    assert "not authenticated" in classify("HTTPError: 401 Client Error: Unauthorized")[1]  # type: ignore[index]


# --------------------------------------------------------------------------- encodings


@pytest.mark.parametrize(
    "name", ["sglang-start-utf16le-bom.log", "vllm-oom-utf16be-bom.log", "vllm-oom-utf32le-bom.log"]
)
def test_bom_decoding_does_not_depend_on_chunking(name):
    data = (HANDMADE / name).read_bytes()
    whole = _parse_bytes(data, len(data)).state
    for step in (1, 3, 4095, 8193):
        st = _parse_bytes(data, step).state
        assert st.status == whole.status != "unreadable"
        f, fw = st.failure, whole.failure
        assert (f and (f.kind, f.line_no, f.line)) == (fw and (fw.kind, fw.line_no, fw.line))
        assert st.lines == whole.lines


def test_a_live_start_is_parsed_as_it_arrives_whatever_the_encoding():
    p = LogParser()
    assert p.feed(b"\xff") == []  # may yet be a BOM
    p.feed(b"\xfe" + (SG_READY.split("\n")[0] + "\n").encode("utf-16-le"))
    assert p.state.phase == "process-start" and p.state.facts["model"] == "m"
    p.feed((SG_READY.split("\n", 1)[1] + "\n").encode("utf-16-le"))
    assert p.state.status == "ready"
    # a live binary stream is judged at the first pause
    p = LogParser()
    p.feed(bytes(range(256)) * 4)
    p.flush()
    assert p.state.status == "unreadable"


def test_a_hole_of_nuls_at_the_start_is_not_binary():
    p = _parse_bytes(b"\x00" * 5000 + SG_READY.encode() + b"\n", 4096)
    assert p.state.status == "ready"


@pytest.mark.parametrize(
    "data",
    [
        bytes(range(256)) * 40,  # binary
        SG_READY.encode("utf-16-le"),  # UTF-16 without a BOM
    ],
    ids=["binary", "utf16-without-bom"],
)
def test_binary_content_is_unreadable(data):
    p = _parse_bytes(data, 1000)
    assert p.state.status == "unreadable" and p.state.describe().startswith("unreadable: ")
    assert p.state.failure is None


@pytest.mark.parametrize("name", ["sglang-utf16-no-bom.log", "vllm-gzipped-binary.log"])
def test_parse_log_unreadable_exits_2_with_one_line(name):
    r = subprocess.run(
        [*tunedeck_cmd(), "parse-log", str(HANDMADE / name)], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert r.returncode == 2, r
    assert r.stdout == ""
    lines = r.stderr.strip().split("\n")
    assert len(lines) == 1 and name in lines[0] and "unreadable" in lines[0]


# --------------------------------------------------------------------------- provisional exceptions


def test_a_bare_exception_is_provisional_until_the_engine_dies():
    head = "[2026-03-02 16:00:01] server_args=ServerArgs(model_path='m', tp_size=1, port=30000)\n"
    exc = "AssertionError: tp_size must divide the number of KV heads\n"
    p = LogParser()
    p.feed_text(head + exc)
    assert p.state.failure is None  # the process may still be writing
    p.feed_text("[2026-03-02 16:00:02] Received sigquit from a child process. It usually means the child failed.\n")
    assert p.state.failure is not None and p.state.failure.line == exc.strip()
    # the same line at the file's end with no progress after it: the engine died there
    st, _ = parse_text(head + exc)
    assert st.status == "failed" and st.failure.line == exc.strip() and st.failure.origin == "exception"


def test_progress_after_a_bare_exception_clears_it():
    lines = SG_READY.split("\n")
    st, _ = parse_text("\n".join([lines[0], "ValueError: optional plugin missing", *lines[1:3]]) + "\n")
    assert st.status == "starting" and st.failure is None


def test_a_request_error_at_the_end_of_a_served_log_stays_a_warning():
    st, _ = parse_text(SG_READY + "\nValueError: The input (41000 tokens) is longer than the model's context length\n")
    assert st.status == "ready"


def test_another_programs_traceback_at_the_end_is_not_the_engines():
    lines = SG_READY.split("\n")
    tb = [
        "Traceback (most recent call last):",
        '  File "/app/rag/main.py", line 88, in warm_cache',
        '  File "/usr/local/lib/python3.11/site-packages/httpx/_transports/default.py", line 118, in map',
        "httpx.ConnectError: [Errno 111] Connection refused",
    ]
    st, _ = parse_text("\n".join([*lines[:2], *tb]) + "\n")
    assert st.failure is None
    # the same traceback with every frame in a library: the engine's call, and the log ends there
    st, _ = parse_text("\n".join([*lines[:2], tb[0], *tb[2:]]) + "\n")
    assert st.status == "failed" and st.failure.line.startswith("httpx.ConnectError")


def _illegal_access_traceback(rank: int) -> str:
    """A scheduler's traceback on TP rank ``rank``: CUDA's illegal memory access."""
    return (
        f"[2026-03-02 16:10:00 TP{rank}] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1, in event_loop\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )


def _assert_went_down_with_the_illegal_access(after_ready: str) -> None:
    st, _ = parse_text(SG_READY + "\n" + after_ready)
    assert st.status == "failed" and st.failure.line.startswith("RuntimeError: CUDA error: an illegal")


def test_the_engine_going_down_after_ready_is_final():
    st, _ = parse_text(SG_READY + "\n[2026-03-02 16:10:00] main process disappeared, exiting\n")
    assert st.status == "failed" and st.failure.kind == "crash"
    # a scheduler traceback after ready is final even before any later line
    _assert_went_down_with_the_illegal_access(_illegal_access_traceback(0))


def test_another_ranks_serving_line_does_not_clear_the_traceback_the_engine_went_down_with():
    tb = _illegal_access_traceback(1) + (
        "[2026-03-02 16:10:00 TP0] Decode batch, #running-req: 8, #token: 900, token usage: 0.01, "
        "gen throughput (token/s): 800.00, #queue-req: 0\n"
        "[2026-03-02 16:10:01] Received sigquit from a child process. It usually means the child failed.\n"
    )
    _assert_went_down_with_the_illegal_access(tb)


def test_a_request_traceback_after_ready_stays_a_warning_whatever_its_kind():
    tb = (
        "[2026-03-02 16:10:00] Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/utils.py", line 1, in load_image\n'
        "requests.exceptions.HTTPError: 404 Client Error: Not Found for url: https://example.com/cat.png\n"
    )
    st, _ = parse_text(SG_READY + "\n" + tb)
    assert st.status == "ready"
    # the engine dying after it makes it the failure
    st, _ = parse_text(SG_READY + "\n" + tb + "[2026-03-02 16:10:01] main process disappeared, exiting\n")
    assert st.status == "failed" and st.failure.kind == "hf-auth"


def test_the_tracker_confirms_an_excerpts_exception_once_the_process_ended():
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.hostops.runstore import RunRecord
    from tunedeck.hostops.tracker import StartupTracker

    rec = RunRecord("abcdef04", "local", ["x"], engine="vllm", pid=4242, started=1.0, created=1.0)
    tr = StartupTracker(LocalHost(), rec, probe_health=False, poll_gpu=False, clock=lambda: 2.0)
    tr.feed((HANDMADE / "vllm-library-traceback-then-exit.log").read_bytes())
    tr.flush()
    assert tr.parser.state.failure is None  # alive: the library's exception may not be the end
    tr.set_alive(False, 1)
    snap = tr.snapshot()
    assert snap.state == "failed" and snap.proof is not None
    assert snap.proof.startswith("safetensors_rust.SafetensorError: Error while deserializing header")
    assert snap.diagnosis is not None and snap.diagnosis.startswith("safetensors_rust.SafetensorError")


@pytest.mark.parametrize(
    "name,proof",
    [
        ("vllm-library-traceback-then-exit.log", "safetensors_rust.SafetensorError: Error while deserializing header"),
        ("vllm-excerpt-bare-exception-at-end.log", "ImportError: libcudart.so.12: cannot open shared object file"),
    ],
)
async def test_a_dead_run_re_read_from_its_log_names_the_exception_it_ends_on(tmp_path, name, proof):
    """The re-read path (``runs``, the Runs view, the status screen, the deployments' listings)
    knows the process is gone: the exception the log ends on is the cause, as the live tracker
    says, not 'process exited with rc 1'."""
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.hostops.reread import settle
    from tunedeck.hostops.runstore import RunRecord
    from tunedeck.hostops.tracker import StartupTracker

    data = (HANDMADE / name).read_bytes()
    (tmp_path / "log").write_bytes(data)
    status, diag, line = await settle(LocalHost(), str(tmp_path), "vllm", 1, stopping=False)
    assert status == "failed"
    assert line is not None and line.startswith(proof)
    assert diag.startswith(proof.split(":")[0]) and "rc 1" not in diag
    # the live tracker, told the process ended, gives the same verdict
    rec = RunRecord("abcdef05", "local", ["x"], engine="vllm", pid=4242, started=1.0, created=1.0)
    tr = StartupTracker(LocalHost(), rec, probe_health=False, poll_gpu=False, clock=lambda: 2.0)
    tr.feed(data)
    tr.set_alive(False, 1)
    assert tr.state() == (status, diag, line)


def test_the_tracker_confirms_an_exception_that_arrives_after_it_saw_the_process_end():
    """The liveness probe may see the process gone before the log follower reads its last
    lines: those lines are judged as a dead process's too."""
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.hostops.runstore import RunRecord
    from tunedeck.hostops.tracker import StartupTracker

    rec = RunRecord("abcdef06", "local", ["x"], engine="vllm", pid=4242, started=1.0, created=1.0)
    tr = StartupTracker(LocalHost(), rec, probe_health=False, poll_gpu=False, clock=lambda: 2.0)
    tr.set_alive(False, 1)
    tr.feed((HANDMADE / "vllm-excerpt-bare-exception-at-end.log").read_bytes())
    status, diag, line = tr.state()
    assert status == "failed" and line is not None and line.startswith("ImportError: libcudart.so.12")
    assert diag.startswith("ImportError") and tr.parser.state.failure is not None


def test_a_teardown_after_an_orderly_stop_is_not_a_failure():
    stop = "[2026-03-02 17:00:00] INFO:     Shutting down\n"
    teardown = "terminate called without an active exception\n"
    st, _ = parse_text(SG_READY + "\n" + stop + teardown)
    assert st.status == "ready"
    # the same text while serving, with no stop before it: the engine died
    st, _ = parse_text(SG_READY + "\n" + teardown)
    assert st.status == "failed" and st.failure.kind == "crash"


# --------------------------------------------------------------------------- the terminal


def test_parse_log_never_passes_terminal_controls(tmp_path):
    log = tmp_path / "evil.log"
    log.write_bytes(
        SG_READY.encode()
        + b"\n[2026-03-02 16:10:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        + b"RuntimeError: boom \x1b]0;pwned\x07 \xc2\x9b2J \xe2\x80\xae\n"
    )
    for extra in ([], ["--json"]):
        r = subprocess.run([*tunedeck_cmd(), "parse-log", str(log), *extra], capture_output=True, cwd=REPO, timeout=60)
        assert r.returncode == 1, r
        out = r.stdout.decode()
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", out), out
        if not extra:
            assert "advice: read the proving line" in out
