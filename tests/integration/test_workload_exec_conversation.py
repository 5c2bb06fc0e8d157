"""Conversations: turns in order, each carrying the earlier prompts and the answers actually received,
after the think time, up to the concurrency in sessions; checked on what the loopback server received."""

from __future__ import annotations

import json
import re

import pytest

from tests.fakesrv import FakeServer
from tunedeck.bench.client import EndpointConfig, Live, RequestSpec, make_client
from tunedeck.bench.levels import LoadShape, drive, sessions_of
from tunedeck.util.aio import run_async


def _conversations(n_sessions: int, turns: int, think: float) -> list[RequestSpec]:
    specs = []
    i = 0
    for t in range(turns):  # interleaved by turn, as a dataset might list them
        for s in range(n_sessions):
            specs.append(RequestSpec(f"s{s} question {t}.", 3, 4, i, session=s, turn=t, think_s=think if t else 0.0))
            i += 1
    return specs


async def _drive(url: str, specs: list[RequestSpec], endpoint: str, concurrency: int | None) -> list[dict]:
    out: list[dict] = []
    async with make_client() as client:
        await drive(
            client,
            EndpointConfig(url, "fake-model", endpoint),
            specs,
            LoadShape(concurrency=concurrency),
            t0=None,
            live=Live(),
            on_sample=out.append,
        )
    return out


def _received(path) -> list[dict]:
    # the fake server numbers requests from 1 in arrival order; token texts are " r<n>t<k>"
    return [dict(json.loads(line), n=k + 1) for k, line in enumerate(path.read_text().splitlines())]


def _answer(n: int, tokens: int) -> str:
    return "".join(f" r{n}t{k}" for k in range(tokens))


@pytest.mark.timeout(120)
def test_chat_turns_carry_the_conversation_so_far(tmp_path):
    rec = tmp_path / "received.jsonl"
    specs = _conversations(5, 3, 0.15)
    with FakeServer("--ttft-ms", "10", "--itl-ms", "5", "--tag-tokens", "--record", str(rec)) as srv:
        samples = run_async(_drive(srv.url, specs, "chat", 2))
    assert len(samples) == 15 and all(s["success"] for s in samples)
    got = _received(rec)
    assert len(got) == 15
    by_session: dict[int, list[dict]] = {}
    for r in got:
        first = r["body"]["messages"][0]["content"]
        by_session.setdefault(int(re.match(r"s(\d+) ", first).group(1)), []).append(r)
    assert sorted(by_session) == list(range(5))
    for s, reqs in by_session.items():
        assert len(reqs) == 3
        for t, r in enumerate(reqs):  # arrival order is turn order
            msgs = r["body"]["messages"]
            assert len(msgs) == 2 * t + 1
            assert [m["role"] for m in msgs] == ["user", "assistant"] * t + ["user"]
            assert msgs[-1]["content"] == f"s{s} question {t}."
            for k in range(t):
                assert msgs[2 * k]["content"] == f"s{s} question {k}."
                # the answer the server actually streamed for turn k (its own request number)
                assert msgs[2 * k + 1]["content"] == _answer(reqs[k]["n"], 4)
            if t:
                # sent think_s after the previous answer ended (answer: 10 ms + 3 x 5 ms)
                assert r["t"] - reqs[t - 1]["t"] >= 0.15 + 0.02
    # sessions in flight never exceed the concurrency; the samples say session and turn
    spans = {}
    for smp in samples:
        a, b = smp["start_time"], smp["start_time"] + smp["latency"]
        lo, hi = spans.get(smp["session"], (a, b))
        spans[smp["session"]] = (min(lo, a), max(hi, b))
    edges = sorted([(a, 1) for a, _ in spans.values()] + [(b, -1) for _, b in spans.values()])
    cur = peak = 0
    for _t, d in edges:
        cur += d
        peak = max(peak, cur)
    assert peak == 2
    assert sorted((smp["session"], smp["turn"]) for smp in samples) == [(s, t) for s in range(5) for t in range(3)]
    assert all(smp["dispatch_lag"] is not None for smp in samples if smp["turn"])


@pytest.mark.timeout(120)
def test_completions_turns_concatenate_the_earlier_text(tmp_path):
    rec = tmp_path / "received.jsonl"
    specs = _conversations(1, 3, 0.0)
    with FakeServer("--ttft-ms", "5", "--itl-ms", "2", "--tag-tokens", "--record", str(rec)) as srv:
        samples = run_async(_drive(srv.url, specs, "completions", None))
    assert all(s["success"] for s in samples)
    got = _received(rec)
    prompts = [r["body"]["prompt"] for r in got]
    assert prompts[0] == "s0 question 0."
    assert prompts[1] == "s0 question 0." + _answer(1, 4) + "s0 question 1."
    assert prompts[2] == prompts[1] + _answer(2, 4) + "s0 question 2."


@pytest.mark.timeout(120)
def test_a_failed_turn_ends_its_session_without_sending_the_rest(tmp_path):
    rec = tmp_path / "received.jsonl"
    specs = _conversations(1, 4, 0.0)
    with FakeServer("--ttft-ms", "5", "--itl-ms", "2", "--pattern", "ok,e500", "--record", str(rec)) as srv:
        samples = run_async(_drive(srv.url, specs, "chat", 1))
    assert len(_received(rec)) == 2  # turn 1 failed: turns 2 and 3 were never sent
    by_turn = {s["turn"]: s for s in samples}
    assert by_turn[0]["success"] and by_turn[1]["error_type"] == "HTTPStatus"
    for t in (2, 3):
        assert by_turn[t]["error_type"] == "SessionAborted"
        assert "turn 1 failed (HTTPStatus); not sent" in by_turn[t]["error"]


def test_sessions_are_grouped_and_checked():
    specs = [
        RequestSpec("b1", 1, 1, 0, session=7, turn=1),
        RequestSpec("a0", 1, 1, 1, session=3, turn=0),
        RequestSpec("b0", 1, 1, 2, session=7, turn=0),
    ]
    assert [[sp.prompt for sp in turns] for turns in sessions_of(specs)] == [["b0", "b1"], ["a0"]]
    with pytest.raises(ValueError, match="session 7: turn 0 appears twice"):
        sessions_of(specs + [RequestSpec("x", 1, 1, 3, session=7, turn=0)])
    with pytest.raises(ValueError, match="RequestSpec 4: session missing"):
        sessions_of(specs + [RequestSpec("x", 1, 1, 4)])


@pytest.mark.timeout(120)
def test_worker_processes_keep_each_conversation_in_one_worker(tmp_path):
    from tunedeck.bench.config import BenchConfig
    from tunedeck.bench.fanout import run_level_workers
    from tunedeck.bench.levels import Level, Progress

    rec = tmp_path / "received.jsonl"
    specs = _conversations(4, 3, 0.05)
    samples: list[dict] = []
    with FakeServer("--ttft-ms", "5", "--itl-ms", "2", "--tag-tokens", "--record", str(rec)) as srv:
        cfg = BenchConfig(url=srv.url, endpoint="chat", workers=2, warmup=0, preconnect=False)
        ep = EndpointConfig(srv.url, "fake-model", "chat")
        _dur, _health, finished = run_async(
            run_level_workers(
                cfg,
                ep,
                Level(
                    specs,
                    LoadShape(concurrency=2, preopen=False),
                    Progress(0, 0.0, 12),
                    samples.append,
                    lambda m: None,
                    lambda t: None,
                ),
            )
        )
    assert finished and len(samples) == 12 and all(s["success"] for s in samples)
    # each session's turns came from one worker, and each turn carried the answers before it
    workers = {}
    for s in samples:
        workers.setdefault(s["session"], set()).add(s["worker"])
    assert all(len(w) == 1 for w in workers.values()) and {w for ws in workers.values() for w in ws} == {0, 1}
    got = _received(rec)
    for r in got:
        msgs = r["body"]["messages"]
        assert len(msgs) % 2 == 1
        for k in range(len(msgs) // 2):
            assert re.fullmatch(r"( r\d+t\d)+", msgs[2 * k + 1]["content"])
