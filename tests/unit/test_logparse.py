"""The log parser against every real SGLang/vLLM log in the reference set (INDEX.md)."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tunedeck.logparse import (
    ErrorEvent,
    LogParser,
    PhaseEvent,
    StatEvent,
    classify,
    clean_line,
    parse_file,
    parse_text,
    severity,
)

# file -> expected parse (INDEX.md): W = completed weight bars, KV = kv tokens (or True for
# evidence without a token count), G = completed capture bars (label, n, total) or "done"
# (capture finished with no n/m), or ("partial", n, total); R = ready; F = failure kind.
EXPECTED = {
    "sglang-start-1.log": dict(W=[(14, 14)], KV=46611, G=[("", 13, 13)], R=True, F=None),
    "sglang-start-2.log": dict(W=[(2, 2)], KV=105531, G=[("", 4, 4)], R=True, F=None),
    "sglang-start-3.log": dict(W=[(163, 163)], KV=326265, G=[("decode", 20, 20)], R=True, F=None),
    "sglang-start-4.log": dict(
        W=[(15, 15), (1, 1)],
        KV=148717,
        G=[("target prefill", 58, 58), ("target verify", 8, 8), ("draft verify", 8, 8)],
        R=True,
        F=None,
    ),
    "sglang-start-5-incomplete.log": dict(W=[(8, 8)], KV=139814, G=("partial", 0, 1), R=False, F=None),
    "sglang-fail-nccl-1.log": dict(W=[], KV=None, G=[], R=False, F="nccl"),
    "sglang-fail-oom-1.log": dict(W=[], KV=None, G=[], R=False, F="oom"),
    "sglang-fail-capture-1.log": dict(W=[], KV=None, G=[], R=False, F="capture-failed"),
    "sglang-fail-argparse-1.log": dict(W=[], KV=None, G=[], R=False, F="argparse"),
    "vllm-start-1.log": dict(
        W=[(37, 37)],
        KV=67024,
        G=[("mixed prefill-decode, PIECEWISE", 51, 51), ("decode, FULL", 35, 35)],
        R=True,
        F=None,
    ),
    "vllm-start-2.log": dict(
        W=[(1, 1)],
        KV=3875400,
        G=[("mixed prefill-decode, PIECEWISE", 11, 11), ("decode, FULL", 7, 7)],
        R=True,
        F=None,
    ),
    "vllm-start-3.log": dict(W=[(4, 4)], KV=32832, G="done", R=True, F=None),
    "vllm-start-4-ansi.log": dict(
        W=[(4, 4)],
        KV=129504,
        G=[("mixed prefill-decode, PIECEWISE", 51, 51), ("decode, FULL", 35, 35)],
        R=True,
        F=None,
    ),
    "vllm-start-5-tp2.log": dict(W=[(2, 2)], KV=69904, G="done", R=True, F=None),
    "vllm-fail-oom-1.log": dict(W=[(3, 3)], KV=True, G=[], R=False, F="oom"),
    "vllm-fail-kvcache-1.log": dict(W=[(19, 19), (1, 1)], KV=True, G=[], R=False, F="oom"),
    "vllm-fail-oomkill-1.log": dict(W=[(49, 49), (1, 1)], KV=None, G=[], R=False, F=None),
    "vllm-fail-argparse-1.log": dict(W=[], KV=None, G=[], R=False, F="argparse"),
    "vllm-fail-port-1.log": dict(W=[], KV=None, G=[], R=False, F="port"),
    "vllm-fail-nccl-1.log": dict(W=[], KV=None, G=[], R=False, F="nccl"),
    # the third round
    "vllm-fail-terminated-1.log": dict(W=[], KV=None, G=[], R=False, F="terminated"),
    "vllm-offline-done-1.log": dict(W=[(1, 1)], KV=76848, G=[], R=False, F=None),
    "vllm-offline-fail-arch-1.log": dict(W=[(1, 1)], KV=None, G=[], R=False, F="crash"),
    "vllm-start-rocm-1.log": dict(
        W=[(4, 4)],
        KV=782800,
        G=[("mixed prefill-decode, PIECEWISE", 51, 51), ("decode, FULL", 35, 35)],
        R=True,
        F=None,
    ),
    "vllm-fail-oom-rocm-1.log": dict(W=[(4, 4)], KV=None, G=[], R=False, F="oom"),
    "sglang-fail-2node-worker-1.log": dict(W=[], KV=125440, G=[], R=False, F="crash"),
    "vllm-fail-oom-capture-1.log": dict(W=[(4, 4)], KV=502656, G=("partial", 12, 35), R=False, F="oom"),
    "vllm-start-6-tp4-eager.log": dict(W=[(11, 11)], KV=114464, G=[], R=True, F=None),
}


def test_every_real_log_is_covered(real_logs):
    logs = {p.name for p in real_logs.glob("*.log")}
    assert logs == set(EXPECTED), "a reference log has no expected parse (or vice versa)"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_log(real_logs, name):
    exp = EXPECTED[name]
    st, events = parse_file(str(real_logs / name))
    assert st.engine == name.split("-")[0]
    assert st.weight_bars == exp["W"]
    if exp["KV"] is None:
        assert not st.kv_seen
    elif exp["KV"] is True:
        assert st.kv_seen
    else:
        assert st.kv_tokens == exp["KV"]
    g = exp["G"]
    if g == "done":
        assert st.graph_done and st.graph_bars == [] and st.graph is None
        assert st.phase_progress() in (1.0, None)
    elif isinstance(g, tuple):
        assert not st.graph_done and st.graph == g[1:] and st.phase == "graph-capture"
    else:
        assert st.graph_bars == g
        if g:
            assert st.graph_done
    assert st.ready is exp["R"]
    f = st.failure
    if exp["F"] is None:
        assert f is None, f
    else:
        assert f is not None and f.kind == exp["F"], f
        assert f.line and f.cause
    # weight progress events are monotone within a bar and end at 100 %
    if exp["W"]:
        w = [e for e in events if isinstance(e, PhaseEvent) and e.label == "weights" and e.total]
        assert w[-1].progress == 1.0
    # every progress value is within 0..1
    for e in events:
        if isinstance(e, PhaseEvent) and e.progress is not None:
            assert 0.0 <= e.progress <= 1.0


def test_special_cases(real_logs):
    # the port failure comes after the ready line: ready must not stand
    st, _ = parse_file(str(real_logs / "vllm-fail-port-1.log"))
    assert st.ready_line is not None and not st.ready and st.status == "failed"
    assert st.failure.cause == "port 8000 already in use"
    # silent OOM kill: neither ready nor failed from the log alone
    st, _ = parse_file(str(real_logs / "vllm-fail-oomkill-1.log"))
    assert st.status == "starting" and st.compile_seen
    # a start still in progress reports capturing 0/1, not failed
    st, _ = parse_file(str(real_logs / "sglang-start-5-incomplete.log"))
    assert st.status == "starting"
    assert st.describe().startswith("capturing 0/1")
    # the capture crash is a build/link failure, even though the hint text talks about memory
    st, _ = parse_file(str(real_logs / "sglang-fail-capture-1.log"))
    assert st.failure.kind == "capture-failed"
    assert "oom" not in {e.kind for e in st.errors}
    assert "ninja exited" in st.failure.line
    # context lines come with the proving line
    assert len(st.failure.context) > 5
    # the OOM in AcceleratorError form
    st, _ = parse_file(str(real_logs / "sglang-fail-oom-1.log"))
    assert "CUDA error: out of memory" in st.failure.line
    # NCCL: the exception line proves it, not the first WARN
    st, _ = parse_file(str(real_logs / "sglang-fail-nccl-1.log"))
    assert st.failure.line.startswith("RuntimeError: NCCL error")
    # KV too small for max-model-len
    st, _ = parse_file(str(real_logs / "vllm-fail-kvcache-1.log"))
    assert "max model length" in st.failure.cause
    assert st.facts["kv_mem_gib"] == 8.72


def test_facts(real_logs):
    st, _ = parse_file(str(real_logs / "vllm-start-1.log"))
    assert st.facts["attention_backend"] == "FLASH_ATTN"
    assert st.facts["kv_mem_gib"] == 5.11
    assert st.facts["weights_mem_gb"] == 33.98
    assert st.http_url == "http://0.0.0.0:8000"
    st, _ = parse_file(str(real_logs / "sglang-start-3.log"))
    assert st.facts["kv_size_gb"] == 21.35
    assert st.http_url == "http://10.99.91.49:30001"
    st, _ = parse_file(str(real_logs / "vllm-fail-oom-1.log"))
    assert st.facts["kv_mem_gib"] == -1.66


@pytest.mark.parametrize("name", ["sglang-start-4.log", "vllm-start-4-ansi.log", "sglang-start-5-incomplete.log"])
def test_chunking_does_not_matter(real_logs, name):
    data = (real_logs / name).read_bytes()
    whole, _ = parse_file(str(real_logs / name))
    rnd = random.Random(7)
    p = LogParser()
    i = 0
    while i < len(data):
        n = rnd.choice([1, 2, 3, 7, 64, 500, 4096])
        p.feed(data[i : i + n])
        i += n
        if rnd.random() < 0.05:
            p.flush()  # a pause mid-line: the tail is parsed, and not twice
    p.finish()
    st = p.state
    assert st.weight_bars == whole.weight_bars
    assert st.graph_bars == whole.graph_bars
    assert st.graph == whole.graph
    assert st.kv_tokens == whole.kv_tokens
    assert st.ready == whole.ready
    assert st.phase == whole.phase


def test_unterminated_tail_parsed_on_flush():
    p = LogParser("sglang")
    ev = p.feed(b"Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.0it/s]")
    assert ev == []
    ev = p.flush()
    assert [e.n for e in ev if isinstance(e, PhaseEvent) and e.total] == [1]
    assert p.flush() == []
    ev = p.feed(b"\rLoading safetensors checkpoint shards: 100% Completed | 2/2 [00:02<00:00,  1.0it/s]\n")
    assert [(e.n, e.total) for e in ev if isinstance(e, PhaseEvent) and e.total] == [(2, 2)]


def test_prefix_cleaning():
    ln = clean_line(
        "\x1b[1;36m(VllmWorker rank=0 pid=1)\x1b[0;0m \x1b[1;36m(VllmWorker rank=1 pid=2)\x1b[0;0m INFO 07-09 14:34:25 [x.py:1] hello"
    )
    assert ln.msg == "hello" and ln.time == "07-09 14:34:25" and ln.level == "INFO"
    ln = clean_line("2025-02-04 21:21:33 [2025-02-04 05:21:33 TP0] Load weight begin. avail mem=1.00 GB")
    assert ln.msg.startswith("Load weight begin") and ln.rank == "TP0" and ln.time == "2025-02-04 05:21:33"
    ln = clean_line("sglang-1  | [2025-02-04 05:21:33] The server is fired up and ready to roll!")
    assert ln.msg == "The server is fired up and ready to roll!"
    ln = clean_line("2025-02-04T21:21:33.123456789Z INFO 07-09 14:34:25 [x.py:1] hi")
    assert ln.msg == "hi"


def test_compose_and_docker_prefixed_startup():
    text = "\n".join(
        f"sglang-1  | [2025-01-01 00:00:0{i}] {m}"
        for i, m in enumerate(
            [
                "server_args=ServerArgs(model_path='m', attention_backend='fa3')",
                "Load weight begin. avail mem=70.00 GB",
                "Load weight end. type=X, dtype=torch.bfloat16, avail mem=60.00 GB, mem usage=10.00 GB.",
                "KV Cache is allocated. #tokens: 1000, KV size: 1.00 GB",
                "Capture cuda graph begin. This can take up to several minutes. avail mem=5.00 GB",
                "Capture cuda graph end. Time elapsed: 1.00 s. mem usage=0.50 GB. avail mem=4.50 GB.",
                "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
                "The server is fired up and ready to roll!",
            ]
        )
    )
    st, events = parse_text(text + "\n")
    assert st.engine == "sglang" and st.ready and st.kv_tokens == 1000
    assert st.facts["attention_backend"] == "fa3"
    phases = [e.phase for e in events if isinstance(e, PhaseEvent)]
    for p in ("process-start", "weight-loading", "kv-cache", "graph-capture", "warmup", "ready"):
        assert p in phases
    assert (
        phases.index("weight-loading")
        < phases.index("kv-cache")
        < phases.index("graph-capture")
        < phases.index("ready")
    )


def test_sglang_application_startup_complete_is_not_ready():
    st, _ = parse_text("[2025-01-01 00:00:00] INFO:     Application startup complete.\n", engine="sglang")
    assert not st.ready


def test_runtime_stat_lines():
    sg = (
        "[2026-01-01 10:00:00 TP0] Decode batch, #running-req: 12, #token: 3456, token usage: 0.42, "
        "accept len: 2.10, accept rate: 0.70, cuda graph: True, gen throughput (token/s): 1234.56, #queue-req: 3"
    )
    pf = (
        "[2026-01-01 10:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.05, "
        "#running-req: 2, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 99.50"
    )
    vl = (
        "(APIServer pid=1) INFO 01-01 10:00:00 [loggers.py:1] Engine 000: Avg prompt throughput: 120.5 tokens/s, "
        "Avg generation throughput: 880.2 tokens/s, Running: 5 reqs, Waiting: 1 reqs, GPU KV cache usage: 12.5%, "
        "Prefix cache hit rate: 40.0%"
    )
    _, ev = parse_text(sg + "\n" + pf + "\n")
    stats = [e for e in ev if isinstance(e, StatEvent)]
    assert stats[0].kind == "decode" and stats[0].running == 12 and stats[0].queued == 3
    assert stats[0].token_usage == 0.42 and stats[0].gen_throughput == 1234.56 and stats[0].accept_len == 2.1
    assert stats[1].kind == "prefill" and stats[1].input_throughput == 99.5 and stats[1].running == 2
    _, ev = parse_text(vl + "\n")
    (s,) = [e for e in ev if isinstance(e, StatEvent)]
    assert (s.running, s.queued, s.prompt_throughput, s.gen_throughput) == (5, 1, 120.5, 880.2)
    assert s.token_usage == 0.125 and s.prefix_hit_rate == 0.4


@pytest.mark.parametrize(
    "text,kind",
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
        (
            "Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.5",
            "oom",
        ),
        (
            "ValueError: Free memory on device (1.0/80 GiB) on startup is less than desired GPU memory utilization (0.92, 73 GiB).",
            "oom",
        ),
        ("Failed to load model - not enough GPU memory.", "oom"),
        ("torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error", "nccl"),
        ("OSError: [Errno 98] Address already in use", "port"),
        ("port 30001 is in use. Waiting for 5 s", "port"),
        ("tokenizer_port at 30001 is not available in 30 seconds.", "port"),
        ("vllm serve: error: argument --attention-backend: invalid choice: 'FOO'", "argparse"),
        ("launch_server.py: error: unrecognized arguments: --foo", "argparse"),
        ("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "watchdog"),
        ("Scheduler hit an exception: Traceback", "crash"),
        ("Initialization failed. warmup error: boom", "crash"),
        ("Exception: Capture cuda graph failed: CUDA error: out of memory", "capture-failed"),
        ("collect2: error: ld returned 1 exit status", None),
        ("INFO 01-01 00:00:00 [x.py:1] Loading weights took 1.0 seconds", None),
    ],
)
def test_classifier(text, kind):
    from tunedeck.logparse import might_be_fatal

    c = classify(text)
    assert (c[0] if c else None) == kind
    # the parser's cheap pre-filter lets every fatal text through
    assert might_be_fatal(text) is (kind is not None)


@pytest.mark.parametrize(
    "text",
    [
        "Killed",
        "Terminated",
        "KeyboardInterrupt: terminated",
        "*** SIGTERM received at time=1729501290 on cpu 12 ***",
        "Received signal 15, exiting",
        "Received sigquit from a child process. It usually means the child failed.",
        "Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        "EngineDeadError: EngineCore encountered an issue.",
        "Fatal Python error: Segmentation fault",
        "Aborted (core dumped)",
        "WorkerProc failed to start.",
        "Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
        "CUDA graph capture failed",
        "DistBackendError: NCCL error in: x.cpp:1",
    ],
)
def test_prefilter_passes_every_fatal_text(text):
    from tunedeck.logparse import might_be_fatal

    assert classify(text) is not None and might_be_fatal(text)


def test_severity():
    assert severity("(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1] boom") == "error"
    assert severity("RuntimeError: NCCL error: x") == "error"
    assert severity("\x1b[1;33m[2026-01-01 00:00:00] WARNING: foo\x1b[0m") == "warning"
    assert severity("[2026-01-01 00:00:00] Load weight begin.") == "info"


def test_errors_carry_context():
    lines = [f"[2026-01-01 00:00:00] line {i}" for i in range(40)] + ["RuntimeError: NCCL error: boom"]
    _st, ev = parse_text("\n".join(lines) + "\n")
    (err,) = [e for e in ev if isinstance(e, ErrorEvent)]
    assert len(err.context) == 30 and err.context[-1].endswith("line 39")


def parse_log_cli(log: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``tunedeck parse-log LOG [FLAGS]`` as one runs it."""
    return subprocess.run(
        [*tunedeck_cmd(), "parse-log", str(log), *flags], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def test_parse_log_cli_json(real_logs):
    r = parse_log_cli(real_logs / "vllm-start-4-ansi.log", "--json")
    assert r.returncode == 0, r.stderr
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    phases = [o for o in objs if o.get("event") == "phase"]
    w = [o for o in phases if o.get("label") == "weights" and o.get("total")]
    assert w[-1]["progress"] == 1.0 and w[-1]["n"] == 4
    assert any(o["phase"] == "graph-capture" and o.get("progress") == 1.0 for o in phases)
    assert phases[-1]["phase"] == "ready"
    summary = objs[-1]
    assert summary["event"] == "summary" and summary["engine"] == "vllm" and summary["status"] == "ready"
    for o in phases:
        assert set(("phase", "progress", "time", "message")) <= set(o)


def test_parse_log_cli_failure_and_errors(real_logs, tmp_path):
    r = parse_log_cli(real_logs / "sglang-fail-oom-1.log", "--json")
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    assert any(o.get("event") == "error" and o["kind"] == "oom" for o in objs)
    assert objs[-1]["status"] == "failed" and objs[-1]["failure"]["kind"] == "oom"
    r = parse_log_cli(real_logs / "sglang-start-1.log")
    assert r.returncode == 0 and "ready" in r.stdout and "14/14" in r.stdout
    r = parse_log_cli(tmp_path / "missing.log")
    assert r.returncode != 0 and "missing.log" in r.stderr and "Traceback" not in r.stderr


def test_parser_keeps_up_with_thousands_of_lines_per_second(real_logs):
    import time

    data = ((real_logs / "sglang-start-3.log").read_bytes() + (real_logs / "vllm-start-1.log").read_bytes()) * 20
    n = data.count(b"\n")
    p = LogParser()
    t0 = time.process_time()
    for i in range(0, len(data), 4096):
        p.feed(data[i : i + 4096])
    rate = n / max(1e-6, time.process_time() - t0)
    assert rate > 3000, f"{rate:.0f} lines/s"
