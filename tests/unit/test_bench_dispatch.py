"""tunedeck.bench.dispatch.EagerDispatch without a server: what goes per check of the gate, and when."""

from __future__ import annotations

import math
import time

import pytest

from tunedeck.bench.dispatch import EagerDispatch
from tunedeck.bench.http import HttpClient, Written


def _dispatch(c: HttpClient, due: list[float], per_call: int) -> tuple[EagerDispatch, list[tuple[int, bool]]]:
    launched: list[tuple[int, bool]] = []

    def launch(k: int, w: Written | None) -> None:
        launched.append((k, w is not None))

    reqs = [c.build("POST", "http://127.0.0.1:9/v1/completions", b"{}") for _ in due]
    return EagerDispatch(c, "http://127.0.0.1:9", due, reqs, launch, per_call), launched


async def test_a_check_writes_what_is_due_a_few_at_a_time_and_arms_the_gate_for_the_rest() -> None:
    now = time.perf_counter()
    async with HttpClient() as c:
        d, launched = _dispatch(c, [now - 0.002] * 5 + [now + 60.0], per_call=2)
        d.fire(now)
        assert launched == [(0, False), (1, False)]  # no idle connection: their tasks open one
        assert c.gate.armed and c.gate.due == now - 0.002  # still due: the next read goes on
        c.gate.fire(now)
        c.gate.fire(now)
        assert [k for k, _ in launched] == [0, 1, 2, 3, 4] and d.unready == 5
        assert c.gate.due == now + 60.0 and not d.done
        c.gate.fire(now)  # nothing due: nothing written
        assert len(launched) == 5
        d.fire(now + 60.0)
        assert d.done and not c.gate.armed and c.gate.due == math.inf


async def test_a_failure_inside_a_read_callback_is_logged_and_raised_by_the_dispatcher(caplog) -> None:
    now = time.perf_counter()
    async with HttpClient() as c:

        def launch(k: int, w: Written | None) -> None:
            raise RuntimeError("launch broke")

        req = c.build("POST", "http://127.0.0.1:9/v1/completions", b"{}")
        d = EagerDispatch(c, "http://127.0.0.1:9", [now, now], [req, req], launch, 4)
        c.gate.arm(now, d._from_read)
        c.gate.fire(now)  # as Conn.data_received would: it must not raise into that connection
        assert "a check from a read callback failed (1 of 2 gone)" in caplog.text
        assert not c.gate.armed and d.k == 1  # the first is not sent twice
        with pytest.raises(RuntimeError, match="launch broke"):
            await d.run()
        assert not c.gate.armed


def test_due_times_and_requests_must_pair_up() -> None:
    c = HttpClient()
    with pytest.raises(ValueError, match="2 due times for 1 requests"):
        EagerDispatch(c, "http://h", [0.0, 1.0], [c.build("GET", "http://h/")], lambda k, w: None, 4)
