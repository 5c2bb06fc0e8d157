"""The project's log parser reads the simulator's start-up and failure logs as the real ones."""

from __future__ import annotations

import time

import pytest

from tests.simfix import SimProc, free_port
from tunedeck.logparse import parse_text

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize(
    "fault,status,kind,describe",
    [
        (None, "ready", None, "ready"),
        ("oom", "failed", "oom", "failed: CUDA out of memory"),
        ("nccl", "failed", "nccl", "failed: NCCL error"),
        ("port", "failed", "port", "failed: port"),
        ("hang", "starting", None, "capturing "),
    ],
)
def test_parser_reads_sim_logs(engine, fault, status, kind, describe):
    model = ["--model-path", "m", "--tp", "8"] if engine == "sglang" else ["m", "-tp", "8"]
    args = [*model, "--port", str(free_port()), "--sim-load-seconds", "1"] + (["--sim-fault", fault] if fault else [])
    with SimProc(engine, *args) as p:
        if fault is None:
            p.wait_ready()
        elif fault == "hang":
            assert p.wait_for("Capturing", 10)
            time.sleep(1.0)
        else:
            assert p.wait_exit(20) != 0
        raw = p.raw
    st, _events = parse_text(raw, engine)
    assert st.status == status
    assert st.describe().startswith(describe)
    if kind:
        assert st.failure.kind == kind
    if fault in (None, "hang"):
        assert st.kv_tokens and st.kv_tokens > 100000
        assert st.weights == (29, 29)
