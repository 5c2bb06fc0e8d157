"""For the end-to-end A/B tests: copies of the built-in profiles on a free port, and what the
simulator's performance model (tui/sim/perf.py, docs/sim-model.md) predicts for sglang-tuned over
sglang-base."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import REPO


def ab_profiles(user: Path, prefix: str, port: int, *, python: str | None = None) -> dict[str, str]:
    """Copies of the built-in sglang-base and sglang-tuned in the profile folder ``user``, named
    ``PREFIX-base`` and ``PREFIX-tuned``, on ``port`` (parallel test runs must not share the engines'
    default ports) and, given ``python``, run by that interpreter; their names by the originals'."""
    user.mkdir(parents=True, exist_ok=True)
    names = {}
    for src in ("sglang-base", "sglang-tuned"):
        dst = prefix + src.removeprefix("sglang")
        text = (REPO / "profiles" / "servers" / f"{src}.toml").read_text()
        text = re.sub(r'(?m)^name = ".*"$', f'name = "{dst}"', text)
        text = re.sub(r"(?m)^port = \d+$", f"port = {port}", text)
        if python is not None:
            text = text.replace("schema_version = 1", f"schema_version = 1\npython = {json.dumps(python)}", 1)
        (user / f"{dst}.toml").write_text(text)
        names[src] = dst
    return names


def expected_gain_pct(concurrency: int) -> float:
    """Decode speed-up of the sglang-tuned profile over sglang-base at ``concurrency``, in %."""
    from tunedeck.sim import perf

    pcie = (
        ("NCCL_ALGO", "Ring"),
        ("NCCL_BUFFSIZE", "16777216"),
        ("NCCL_MAX_NCHANNELS", "16"),
        ("NCCL_NTHREADS", "512"),
        ("NCCL_P2P_LEVEL", "SYS"),
        ("NCCL_PROTO", "LL"),
    )
    base = perf.PerfConfig("sglang", 8)
    tuned = perf.PerfConfig(
        "sglang", 8, attention_backend="flashinfer", decode_steps=4, disable_custom_all_reduce=True, nccl_env=pcie
    )
    return (perf.throughput(tuned, concurrency)[1] / perf.throughput(base, concurrency)[1] - 1.0) * 100.0


def assert_b_wins_unless_busy(rep: dict) -> None:
    """The simulated tuned side wins, unless the test machine was busy: a level whose client
    machine was busy (or was the limit) carries no headline, and then the headline says so."""
    cmp = rep["comparison"]
    busy = {
        lv["concurrency"]
        for side in ("a", "b")
        for run in rep[side]["runs"]
        for lv in run["levels"]
        if lv["summary"].get("machine_busy") or lv["summary"].get("client_bound")
    }
    if cmp["winner"] is None:
        assert busy and "Not judged" in cmp["headline"], cmp["headline"]
    else:
        assert cmp["winner"] == "B", cmp["headline"]
