"""The parser on logs it had never seen, by class of past mistake.

The logs under tests/data/logs are hand-made (each says so on its first line) in the engines'
real formats (format strings from SGLang and vLLM source, docs/serving-engines.md). Each test
names the class it covers: unknown fatal errors, wrapper lines, other programs' lines, formats,
physical line numbers, several attempts, exit status.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.test_logparse import parse_log_cli
from tunedeck.logparse import ErrorEvent, LogParser, PhaseEvent, parse_file, parse_text

DATA = Path(__file__).resolve().parents[1] / "data" / "logs"


def _parse(name: str):  # type: ignore[no-untyped-def]
    return parse_file(str(DATA / name))


def _physical_line(name: str, needle: str) -> int:
    """1-based physical line (``\\n``) of the first line holding ``needle``."""
    data = (DATA / name).read_bytes().decode()
    for i, line in enumerate(data.split("\n"), 1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {name}")


# --------------------------------------------------------------------------- 1. unknown fatal errors


@pytest.mark.parametrize(
    "name,kind,proof",
    [
        ("vllm-unknown-model-type.log", "crash", "ValueError: The checkpoint you are trying to load has model type"),
        ("sglang-no-accelerator.log", "crash", "RuntimeError: No accelerator (CUDA, XPU, HPU, MPS) is available."),
        ("vllm-apiserver-crash-after-load.log", "crash", "ValueError: The supplied chat template string"),
        ("vllm-keyboardinterrupt-terminated.log", "terminated", "KeyboardInterrupt: terminated"),
        ("vllm-ray-placement-sigterm.log", "terminated", "*** SIGTERM received at time=1729501290"),
    ],
)
def test_unknown_fatal_errors_fail_the_run(name, kind, proof):
    st, _ = _parse(name)
    assert st.status == "failed" and not st.ready
    f = st.failure
    assert f is not None and f.kind == kind, f
    assert proof in f.line
    assert f.line_no == _physical_line(name, proof)


def test_unknown_crash_cause_names_the_exception():
    st, _ = _parse("vllm-unknown-model-type.log")
    assert st.failure.cause.startswith("ValueError: The checkpoint")
    # the KeyError it translates is kept as context, not shown as the cause
    assert "KeyError: 'newarch'" in (st.failure.wrapper or "")


def test_ray_termination_says_what_it_waited_for():
    st, _ = _parse("vllm-ray-placement-sigterm.log")
    assert "placement group" in st.failure.cause
    assert any("placement group" in c for c in st.failure.context)


def test_a_traceback_the_engine_survives_is_not_a_failure():
    text = "\n".join(
        [
            "[2025-01-01 00:00:00] server_args=ServerArgs(model_path='m')",
            "[2025-01-01 00:00:01 TP0] Load weight begin. avail mem=70.00 GB",
            "Traceback (most recent call last):",
            '  File "/sgl-workspace/sglang/python/sglang/srt/hf_transformers_utils.py", line 1, in download',
            "ConnectionError: HEAD https://huggingface.co/m/resolve/main/config.json timed out",
            "[2025-01-01 00:00:09 TP0] KV Cache is allocated. #tokens: 1000, KV size: 1.00 GB",
            "[2025-01-01 00:00:12] The server is fired up and ready to roll!",
        ]
    )
    st, _ = parse_text(text + "\n")
    assert st.status == "ready" and st.failure is None


def test_another_ranks_progress_does_not_clear_a_crash():
    text = "\n".join(
        [
            "[2025-01-01 00:00:00] server_args=ServerArgs(model_path='m', tp_size=2)",
            "[2025-01-01 00:00:01 TP1] Load weight begin. avail mem=70.00 GB",
            "[2025-01-01 00:00:02 TP1] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/x/fp8.py", line 1, in f',
            "ValueError: Unsupported fp8 type",
            "[2025-01-01 00:00:03 TP0] KV Cache is allocated. #tokens: 1000, KV size: 1.00 GB",
            "[2025-01-01 00:00:04 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=5.00 GB",
        ]
    )
    st, _ = parse_text(text + "\n")
    assert st.status == "failed" and st.failure.line == "ValueError: Unsupported fp8 type"


def test_a_request_traceback_while_serving_is_not_a_failure():
    text = "\n".join(
        [
            "(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
            "(APIServer pid=1) INFO:     Application startup complete.",
            "(APIServer pid=1) ERROR:    Exception in ASGI application",
            "(APIServer pid=1) Traceback (most recent call last):",
            '(APIServer pid=1)   File "/x/serving_chat.py", line 1, in create',
            "(APIServer pid=1) KeyError: 'messages'",
            "(APIServer pid=1) INFO 01-01 00:00:10 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
            "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%",
        ]
    )
    lines = text.split("\n")
    # right after the traceback, before serving resumes: still ready (a request failed, not the server)
    st, _ = parse_text("\n".join(lines[:-1]) + "\n")
    assert st.status == "ready" and st.failure is None
    st, _ = parse_text(text + "\n")
    assert st.status == "ready" and st.failure is None
    # the same traceback followed by the engine's death is a failure
    dead = (
        "\n".join(lines[:-1])
        + "\n(APIServer pid=1) ERROR 01-01 00:00:11 [async_llm.py:1] EngineDeadError: EngineCore encountered an issue.\n"
    )
    st, _ = parse_text(dead)
    assert st.status == "failed" and st.failure.line.endswith("KeyError: 'messages'")


def test_exception_names_without_error_in_them():
    text = "\n".join(
        [
            "(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.11.0",
            "(EngineCore_DP0 pid=2) ERROR 01-01 00:00:05 [core.py:1] Traceback (most recent call last):",
            '(EngineCore_DP0 pid=2) ERROR 01-01 00:00:05 [core.py:1]   File "/x/vllm/compile.py", line 1, in f',
            "(EngineCore_DP0 pid=2) ERROR 01-01 00:00:05 [core.py:1] triton.runtime.errors.OutOfResources: out of "
            "resource: shared memory, Required: 131072, Hardware limit: 101376.",
        ]
    )
    st, _ = parse_text(text + "\n")
    assert st.failure.kind == "crash" and st.failure.line_no == 4
    assert st.failure.cause.startswith("triton.runtime.errors.OutOfResources: out of resource")


def test_exception_group_points_at_the_sub_exception():
    text = "\n".join(
        [
            "[2025-01-01 00:00:00] server_args=ServerArgs(model_path='m')",
            "  + Exception Group Traceback (most recent call last):",
            '  |   File "/sgl-workspace/sglang/python/sglang/srt/entrypoints/http_server.py", line 1, in lifespan',
            "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)",
            "  +-+---------------- 1 ----------------",
            "    | Traceback (most recent call last):",
            '    |   File "/sgl-workspace/sglang/python/sglang/srt/managers/tokenizer_manager.py", line 1, in f',
            "    | ValueError: tokenizer has no chat template",
            "    +------------------------------------",
        ]
    )
    st, _ = parse_text(text + "\n")
    assert st.failure.line == "ValueError: tokenizer has no chat template" and st.failure.line_no == 8


# --------------------------------------------------------------------------- 2. wrapper lines


@pytest.mark.parametrize(
    "name,proof,wrapper",
    [
        (
            "vllm-importerror-wrapper.log",
            "ImportError: /usr/local/lib/python3.12/dist-packages/vllm/_C.abi3.so: undefined symbol",
            "EngineCore failed to start.",
        ),
        (
            "vllm-memory-profiling-wrapper.log",
            "AssertionError: Error in memory profiling.",
            "EngineCore failed to start.",
        ),
        ("sglang-fp8-sigquit.log", "ValueError: Unsupported fp8 type", "Scheduler hit an exception"),
        ("sglang-invalid-ordinal.log", "torch.AcceleratorError: CUDA error: invalid device ordinal", "RuntimeError"),
    ],
)
def test_the_root_exception_is_the_proof_not_the_wrapper(name, proof, wrapper):
    st, events = _parse(name)
    f = st.failure
    assert f is not None and f.origin == "exception", f
    assert proof in f.line
    for w in ("See root cause above", "Received sigquit", "Scheduler hit an exception", "EngineCore failed to start"):
        assert w not in f.line and w not in f.cause
    assert f.line_no == _physical_line(name, proof)
    assert wrapper in (f.wrapper or "")
    # the wrapper lines are still reported as errors of their own
    assert any(isinstance(e, ErrorEvent) and e.origin == "wrapper" for e in events)


def test_first_failing_rank_wins_over_the_ranks_it_took_down():
    # TP1's ValueError comes first; TP0's NCCL error is a consequence
    st, _ = _parse("sglang-fp8-sigquit.log")
    assert st.failure.kind == "crash" and "fp8" in st.failure.line
    assert {e.kind for e in st.errors} >= {"crash", "nccl", "terminated"}


def test_real_wrapper_logs_point_at_the_cause(real_logs):
    st, _ = parse_file(str(real_logs / "sglang-fail-capture-1.log"))
    assert st.failure.line == "RuntimeError: ninja exited with status 1"
    assert st.failure.kind == "capture-failed"
    assert "Capture cuda graph failed" in st.failure.wrapper
    st, _ = parse_file(str(real_logs / "vllm-fail-oom-1.log"))
    assert "ValueError: No available memory for the cache blocks" in st.failure.line


def test_ray_worker_traceback_with_ip_prefix():
    text = "\n".join(
        [
            "INFO 09-04 10:00:00 api_server.py:1] vLLM API server version 0.6.0",
            "(RayWorkerWrapper pid=3031, ip=10.0.0.2) ERROR 09-04 10:00:05 worker_base.py:464] Error executing method "
            "init_device. This might cause deadlock in distributed execution.",
            "(RayWorkerWrapper pid=3031, ip=10.0.0.2) ERROR 09-04 10:00:05 worker_base.py:464] Traceback (most recent call last):",
            '(RayWorkerWrapper pid=3031, ip=10.0.0.2) ERROR 09-04 10:00:05 worker_base.py:464]   File "/x/worker.py", line 1, in f',
            "(RayWorkerWrapper pid=3031, ip=10.0.0.2) ERROR 09-04 10:00:05 worker_base.py:464] RuntimeError: CUDA error: invalid device ordinal",
            "ERROR 09-04 10:00:06 multiproc_worker_utils.py:1] Worker proc VllmWorker-1 died unexpectedly, shutting down executor.",
        ]
    )
    st, _ = parse_text(text + "\n")
    assert st.failure.line_no == 5 and st.failure.cause == "RuntimeError: CUDA error: invalid device ordinal"
    assert st.failure.rank == "RayWorkerWrapper"


@pytest.mark.parametrize(
    "wrapper",
    [
        "[2025-01-01 00:00:05] Rank 0 scheduler is dead. Please check if there are relevant logs.",
        "[2025-01-01 00:00:05] Child process unexpectedly failed with exitcode=1. pid=33",
        "[2025-01-01 00:00:05] DetokenizerManager hit an exception: boom",
    ],
)
def test_newer_sglang_wrappers_fail_the_run_but_never_prove_it(wrapper):
    st, _ = parse_text("[2025-01-01 00:00:00] server_args=ServerArgs(model_path='m')\n" + wrapper + "\n")
    assert st.status == "failed" and st.failure.origin == "wrapper"
    st, _ = parse_text(
        "[2025-01-01 00:00:00] server_args=ServerArgs(model_path='m')\nTraceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/entrypoints/engine.py", line 1, in f\n'
        "OSError: libcudart.so.12: cannot open shared object file\n" + wrapper + "\n"
    )
    assert st.failure.line == "OSError: libcudart.so.12: cannot open shared object file"


# --------------------------------------------------------------------------- 3. other programs' lines


def test_other_uvicorn_apps_do_not_make_vllm_ready():
    name = "vllm-v0-with-rag-stack.log"
    st, events = _parse(name)
    ready = [e for e in events if isinstance(e, PhaseEvent) and e.phase == "ready"]
    assert len(ready) == 1
    # the engine's own ready line: after its routes and its own uvicorn block
    assert ready[0].line_no == _physical_line(name, "Uvicorn running on socket") - 1
    assert st.http_url == "http://0.0.0.0:8000"
    assert st.graph_bars == []  # the app's "Batches" bar is not graph capture
    assert st.failure is None  # nor is the RAG app's own traceback the engine's


def test_other_uvicorn_apps_before_the_engine_loaded():
    lines = (DATA / "vllm-v0-with-rag-stack.log").read_text().splitlines()
    cut = next(i for i, ln in enumerate(lines) if "Loading model weights took" in ln)
    st, _ = parse_text("\n".join(lines[:cut]) + "\n")
    assert st.status == "starting" and st.ready_line is None and st.http_url is None


def test_compose_services_other_than_the_engine_are_ignored():
    st, events = _parse("compose-rag-stack.log")
    ready = [e for e in events if isinstance(e, PhaseEvent) and e.phase == "ready"]
    assert len(ready) == 1
    assert ready[0].line_no == _physical_line(
        "compose-rag-stack.log", "(APIServer pid=1) INFO:     Application startup complete."
    )
    assert st.http_url == "http://0.0.0.0:8000"
    assert st.failure is None  # the RAG app's own traceback is not the engine's
    assert st.status == "ready"


def test_ready_texts_quoted_inside_other_lines_do_not_count():
    text = "\n".join(
        [
            "[2025-01-01 00:00:00] server_args=ServerArgs(model_path='m')",
            "[2025-01-01 00:00:01 TP0] KV Cache is allocated. #tokens: 1000, KV size: 1.00 GB",
            "waiting for 'The server is fired up and ready to roll!' in the log ...",
            "healthcheck: grep -q 'Application startup complete.' /var/log/app.log",
        ]
    )
    st, _ = parse_text(text + "\n")
    assert st.ready_line is None and st.status == "starting"


# --------------------------------------------------------------------------- 4. formats


def test_vllm_v0_formats():
    st, _ = _parse("vllm-v0-with-rag-stack.log")
    assert st.kv_seen and st.facts["gpu_blocks"] == 27913
    assert st.graph_done and st.facts["graph_seconds"] == 13.0
    assert st.weights_done and st.facts["weights_mem_gb"] == 14.9888


def test_vllm_v0_capture_start_and_compile_forms():
    st, events = _parse("vllm-v0-with-rag-stack.log")
    caps = [e for e in events if isinstance(e, PhaseEvent) and e.phase == "graph-capture"]
    assert caps[0].progress == 0.0 and "Capturing the model for CUDA graphs" in caps[0].message
    assert caps[-1].done
    st, _ = parse_text(
        "(VllmWorker rank=1 pid=2) INFO 07-09 14:35:10 [monitor.py:33] torch.compile takes 13.99 s in total\n"
    )
    assert st.compile_seen and st.phase == "compile"


@pytest.mark.parametrize(
    "wrapper",
    [
        "RuntimeError: Worker failed with error 'CUDA error: an illegal memory access was encountered', please check "
        "the stack trace above for the root cause",
        "Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace "
        "for root cause.",
    ],
)
def test_vllm_worker_wrappers_are_not_the_cause(wrapper):
    text = "\n".join(
        [
            "(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.11.0",
            "(Worker_TP1 pid=5) ERROR 01-01 00:00:05 [multiproc_executor.py:1] Traceback (most recent call last):",
            '(Worker_TP1 pid=5) ERROR 01-01 00:00:05 [multiproc_executor.py:1]   File "/x/vllm/worker.py", line 1, in f',
            "(Worker_TP1 pid=5) ERROR 01-01 00:00:05 [multiproc_executor.py:1] torch.AcceleratorError: CUDA error: "
            "an illegal memory access was encountered",
            "(EngineCore_DP0 pid=3) ERROR 01-01 00:00:06 [core.py:1] Traceback (most recent call last):",
            '(EngineCore_DP0 pid=3) ERROR 01-01 00:00:06 [core.py:1]   File "/x/vllm/v1/executor.py", line 1, in f',
            f"(EngineCore_DP0 pid=3) ERROR 01-01 00:00:06 [core.py:1] {wrapper}",
        ]
    )
    st, _ = parse_text(text + "\n")
    assert st.failure.line_no == 4 and "illegal memory access" in st.failure.line
    assert any(e.origin == "wrapper" and e.line_no == 7 for e in st.errors)


def test_uvicorn_socket_form_gives_the_port():
    st, _ = parse_text(
        "INFO 10-10 12:09:05 gpu_executor.py:122] # GPU blocks: 10, # CPU blocks: 2\n"
        "INFO:     Uvicorn running on socket ('0.0.0.0', 8000) (Press CTRL+C to quit)\n",
        engine="vllm",
    )
    assert st.http_url == "http://0.0.0.0:8000"


def test_sglang_old_and_piecewise_forms():
    st, events = _parse("sglang-old-forms.log")
    assert st.kv_seen and st.kv_tokens == 105531
    assert st.facts["max_total_num_tokens"] == 105531 and st.facts["context_len"] == 32768
    assert st.facts["max_running_requests"] == 4097
    # the piecewise capture and its bare bar count; the app's bars after the end do not
    assert st.graph_bars == [("piecewise", 4, 4)] and st.graph_done
    phases = [e.phase for e in events if isinstance(e, PhaseEvent)]
    assert phases.index("kv-cache") < phases.index("graph-capture")
    assert st.status == "ready"


def test_memory_pool_end_is_kv_cache():
    st, _ = parse_text("[2025-01-01 00:00:00 TP0] Memory pool end. avail mem=8.10 GB\n", engine="sglang")
    assert st.kv_seen and st.phase == "kv-cache"


# --------------------------------------------------------------------------- 5. line numbers


def test_line_numbers_are_physical_lines_with_segments():
    name = "vllm-crlf-redraws-oom.log"
    st, events = _parse(name)
    f = st.failure
    # (line 1 is the file's provenance header: it is counted, not parsed)
    assert f.kind == "oom" and f.line_no == 11 and f.segment is None
    assert f.line_no == _physical_line(name, "torch.OutOfMemoryError")
    # the wrapper glued after the capture bar's redraws: line 8, its 5th \r segment
    (w,) = [e for e in events if isinstance(e, ErrorEvent) and "EngineCore failed to start" in e.line]
    assert (w.line_no, w.segment) == (8, 5)
    shards = [e for e in events if isinstance(e, PhaseEvent) and e.label == "weights" and e.total]
    assert {e.line_no for e in shards} == {5} and shards[-1].segment == 6
    assert st.lines == 12


def test_line_numbers_do_not_depend_on_chunking():
    data = (DATA / "vllm-crlf-redraws-oom.log").read_bytes()
    whole, ev_whole = _parse("vllm-crlf-redraws-oom.log")
    for size in (1, 3, 17, 4096):
        p = LogParser()
        ev = []
        for i in range(0, len(data), size):
            ev += p.feed(data[i : i + size])
            if i % 5 == 0:
                ev += p.flush()
        ev += p.finish()
        assert [(e.line_no, e.segment) for e in ev if isinstance(e, ErrorEvent)] == [
            (e.line_no, e.segment) for e in ev_whole if isinstance(e, ErrorEvent)
        ]
        assert p.state.failure.line_no == whole.failure.line_no


def test_real_log_line_numbers_land_on_the_proof(real_logs):
    for name in (
        "sglang-fail-capture-1.log",
        "sglang-fail-oom-1.log",
        "vllm-fail-kvcache-1.log",
        "vllm-fail-port-1.log",
    ):
        st, _ = parse_file(str(real_logs / name))
        lines = (real_logs / name).read_bytes().decode("utf-8", "replace").split("\n")
        assert st.failure.line in lines[st.failure.line_no - 1].replace("\x1b[0;0m", ""), name


# --------------------------------------------------------------------------- 6. several attempts


def test_latest_attempt_decides_ready():
    st, _ = _parse("sglang-two-attempts.log")
    assert st.attempt == 2 and st.attempt_line == 13  # line 1: the provenance header
    assert st.status == "ready" and st.failure is None and st.kv_tokens == 412330


def test_latest_attempt_decides_failed():
    st, _ = _parse("vllm-ready-then-restart-fails.log")
    assert st.attempt == 2 and st.ready_line is None
    assert st.status == "failed" and st.failure.kind == "oom" and st.failure.line_no == 12


# --------------------------------------------------------------------------- 7. exit status


@pytest.mark.parametrize(
    "path,rc",
    [
        (DATA / "sglang-two-attempts.log", 0),
        (DATA / "sglang-fp8-sigquit.log", 1),
        (DATA / "vllm-keyboardinterrupt-terminated.log", 1),
        (DATA / "nope.log", 2),
    ],
)
def test_parse_log_exit_status(path, rc):
    r = parse_log_cli(path)
    assert r.returncode == rc, r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_parse_log_exit_status_starting_and_json_lines(tmp_path):
    lines = (DATA / "vllm-v0-with-rag-stack.log").read_text().splitlines()
    p = tmp_path / "partial.log"
    p.write_text("\n".join(lines[:15]) + "\n")
    r = parse_log_cli(p)
    assert r.returncode == 3 and "status: starting" in r.stdout
    r = parse_log_cli(DATA / "sglang-fp8-sigquit.log", "--json")
    assert r.returncode == 1
    summary = json.loads(r.stdout.splitlines()[-1])
    assert summary["failure"]["line_no"] == 14 and "fp8" in summary["failure"]["line"]
    assert "Scheduler hit an exception" in summary["failure"]["wrapper"]
    r = parse_log_cli(DATA / "sglang-fp8-sigquit.log")
    assert "proof: line 14: ValueError: Unsupported fp8 type" in r.stdout


# --------------------------------------------------------------------------- the run view's cause

WRAPPERS = ("See root cause above", "Received sigquit", "Scheduler hit an exception", "failed to start", "Killed")


@pytest.mark.parametrize(
    "name,root",
    [
        ("sglang-fail-capture-1.log", "RuntimeError: ninja exited with status 1"),
        ("sglang-fail-nccl-1.log", "RuntimeError: NCCL error: remote process exited or there was a network error"),
        ("sglang-fail-oom-1.log", "torch.AcceleratorError: CUDA error: out of memory"),
        ("vllm-fail-oom-1.log", "ValueError: No available memory for the cache blocks"),
        ("vllm-fail-kvcache-1.log", "ValueError: To serve at least one request with the model's max seq len (262144)"),
        ("vllm-fail-nccl-1.log", "RuntimeError: NCCL error: unhandled cuda error"),
    ],
)
def test_run_view_cause_is_the_root_exception_of_real_logs(real_logs, name, root):
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.hostops.runstore import RunRecord
    from tunedeck.hostops.tracker import StartupTracker

    rec = RunRecord("abcdef02", "local", ["x"], engine=name.split("-")[0], pid=4242, started=1.0, created=1.0)
    tr = StartupTracker(LocalHost(), rec, probe_health=False, poll_gpu=False, clock=lambda: 2.0)
    tr.feed((real_logs / name).read_bytes())
    tr.flush()
    tr.set_alive(False, 1)
    snap = tr.snapshot()
    assert snap.state == "failed" and root in snap.proof, snap
    assert not any(w in snap.proof for w in WRAPPERS)


def test_an_unterminated_last_line_counts_once_the_process_ended():
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.hostops.runstore import RunRecord
    from tunedeck.hostops.tracker import StartupTracker

    rec = RunRecord("abcdef03", "local", ["x"], engine="sglang", pid=4242, started=1.0, created=1.0)
    tr = StartupTracker(LocalHost(), rec, probe_health=False, poll_gpu=False, clock=lambda: 2.0)
    tr.feed(
        b'Traceback (most recent call last):\n  File "/usr/lib/python3/site-packages/sglang/launch_server.py", line 1\n'
        b"RuntimeError: No accelerator (CUDA) is available."
    )
    tr.flush()  # an idle pause: a half-written exception line is not parsed yet
    assert tr.parser.state.failure is None
    tr.set_alive(False, 1)
    snap = tr.snapshot()
    assert snap.state == "failed" and snap.proof == "RuntimeError: No accelerator (CUDA) is available."


def test_advice_for_a_recorded_cause():
    """A run record's cause (and proving line) gets the advice of its failure kind."""
    from tunedeck.logparse import ADVICE, advice_for

    assert (
        advice_for("CUDA out of memory", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
        == (ADVICE["oom"])
    )
    assert advice_for("OSError: [Errno 98] Address already in use") == ADVICE["port"]
    assert advice_for("RuntimeError: CUDA error: an illegal memory access was encountered") == ADVICE["crash"]
    assert advice_for("process exited with rc 1") == "" and advice_for(None) == ""


def test_ready_in_is_the_time_to_ready_not_the_time_since():
    """A run view opened 13 minutes after a 5-s start says ready in 5 s: the ready time recorded
    by whoever saw it first, else the moment this tracker first saw it (then frozen)."""
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.hostops.runstore import RunRecord
    from tunedeck.hostops.tracker import StartupTracker

    ready_log = b"[2026-12-03 10:00:00] INFO:     The server is fired up and ready to roll!\n"
    now = [800.0]
    seen = RunRecord("abcdef04", "local", ["x"], engine="sglang", pid=4242, started=1.0, created=1.0)
    seen.timeline = [{"t": 6.0, "event": "ready", "diagnosis": None}]
    tr = StartupTracker(LocalHost(), seen, probe_health=False, poll_gpu=False, clock=lambda: now[0])
    tr.feed(ready_log)
    snap = tr.snapshot()
    assert snap.state == "ready" and snap.elapsed == 5.0, snap
    fresh = RunRecord("abcdef05", "local", ["x"], engine="sglang", pid=4242, started=1.0, created=1.0)
    now[0] = 10.0
    tr = StartupTracker(LocalHost(), fresh, probe_health=False, poll_gpu=False, clock=lambda: now[0])
    tr.feed(ready_log)
    assert tr.snapshot().elapsed == 9.0
    now[0] = 800.0
    assert tr.snapshot().elapsed == 9.0  # the clock stopped at ready
