"""ServerCollector against small real HTTP servers on loopback."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.fake_engines import SGLANG_METRICS, VLLM_METRICS, FakeEngine, fill
from tests.ports import free_port
from tunedeck.collectors.servers import ServerCollector, ServerSpec
from tunedeck.hostops.localhost import LocalHost
from tunedeck.model import NA

pytestmark = pytest.mark.timeout(30)


async def test_sglang_ready_with_metrics_and_window_ttft() -> None:
    async with FakeEngine("sglang", model="Qwen/Qwen3-8B") as e:
        e.metrics = fill(SGLANG_METRICS, b1=10, b2=10, b3=10, s=0.5)
        async with ServerCollector(LocalHost(), [ServerSpec("sg", "auto", e.port)]) as c:
            (a,) = await c.sample()
            assert (a.state, a.engine, a.model, a.metrics_state) == ("ready", "sglang", "Qwen/Qwen3-8B", "ok")
            assert (a.running, a.waiting) == (12, 3)
            assert a.kv_cache_usage == pytest.approx(0.42)
            assert a.gen_throughput == pytest.approx(1234.5)
            assert a.spec_accept_rate == pytest.approx(0.71)
            assert a.ttft_p50 <= 0.1  # first scrape: since start, all in the first bucket
            assert a.port == e.port and a.url == f"http://127.0.0.1:{e.port}"
            # ten new requests, all between 0.25 and 0.5 s
            e.metrics = fill(SGLANG_METRICS, b1=10, b2=10, b3=20, s=4.5)
            (b,) = await c.sample()
            assert 0.25 < b.ttft_p50 <= 0.5
            assert b.ttft_mean == pytest.approx(0.4)
            # no new requests: no window figure (N/A, not 0)
            (d,) = await c.sample()
            assert d.ttft_p50 is NA and d.ttft_mean is NA
            assert e.hits["/v1/models"] == 1  # the model name is fetched once


async def test_vllm_rates_from_counters() -> None:
    async with FakeEngine("vllm", model="meta-llama/Llama-3.1-8B") as e:
        e.metrics = fill(VLLM_METRICS, gen=1000, draft=100, acc=50, b1=1, b2=2, b3=2, s=0.4)
        async with ServerCollector(LocalHost(), [ServerSpec("v", "vllm", e.port)]) as c:
            (a,) = await c.sample()
            assert (a.state, a.engine, a.model) == ("ready", "vllm", "meta-llama/Llama-3.1-8B")
            assert (a.running, a.waiting, a.kv_cache_usage) == (7, 2, 0.25)
            assert a.gen_throughput is NA  # a rate needs two scrapes
            assert a.spec_accept_rate == pytest.approx(0.5)
            await asyncio.sleep(0.5)
            e.metrics = fill(VLLM_METRICS, gen=2000, draft=200, acc=140, b1=1, b2=2, b3=2, s=0.4)
            (b,) = await c.sample()
            assert 1000 < b.gen_throughput < 2200  # 1000 tokens in ~0.5 s
            assert b.spec_accept_rate == pytest.approx(0.9)  # window: 90 of 100 drafts
            e.metrics = fill(VLLM_METRICS, gen=10, draft=200, acc=140, b1=1, b2=2, b3=2, s=0.4)
            (d,) = await c.sample()
            assert d.gen_throughput is NA  # counter went backwards (restart): no rate


async def test_vllm_old_cache_metric_name() -> None:
    async with FakeEngine("vllm") as e:
        e.metrics = 'vllm:num_requests_running{engine="0"} 1\nvllm:gpu_cache_usage_perc{engine="0"} 0.5\n'
        async with ServerCollector(LocalHost(), [ServerSpec("v", "auto", e.port)]) as c:
            (a,) = await c.sample()
    assert a.engine == "vllm" and a.kv_cache_usage == 0.5 and a.running == 1
    assert a.ttft_p50 is NA and a.waiting is NA


async def test_sglang_health_503_starting_then_ready_then_unhealthy() -> None:
    async with FakeEngine("sglang") as e:
        e.health = 503
        e.metrics = fill(SGLANG_METRICS, b1=0, b2=0, b3=0, s=0)
        async with ServerCollector(LocalHost(), [ServerSpec("sg", "sglang", e.port)]) as c:
            (a,) = await c.sample()
            assert a.state == "starting" and "503" in a.message
            e.health = 200
            (b,) = await c.sample()
            assert b.state == "ready"
            e.health = 503
            (d,) = await c.sample()
            assert d.state == "unhealthy"


async def test_sglang_without_enable_metrics_is_not_a_failure() -> None:
    async with FakeEngine("sglang", model="m") as e:
        e.metrics = None  # 404
        async with ServerCollector(LocalHost(), [ServerSpec("sg", "sglang", e.port)]) as c:
            (a,) = await c.sample()
    assert a.state == "ready" and a.model == "m"
    assert a.metrics_state == "disabled" and "--enable-metrics" in a.message
    assert a.running is NA and a.kv_cache_usage is NA


async def test_refused_port_is_down() -> None:
    port = free_port()
    async with ServerCollector(LocalHost(), [ServerSpec("gone", "vllm", port)]) as c:
        (a,) = await c.sample()
    assert a.state == "down" and "refused" in a.message and a.metrics_state == "none"


async def test_probe_timeout_before_ready_is_starting() -> None:
    async with FakeEngine("vllm") as e:
        e.health_delay = 1.0
        e.metrics = 'vllm:num_requests_running{engine="0"} 0\n'
        async with ServerCollector(LocalHost(), [ServerSpec("v", "vllm", e.port)], probe_timeout=0.3) as c:
            (a,) = await c.sample()
            assert a.state == "starting"
            e.health_delay = 0
            (b,) = await c.sample()
            assert b.state == "ready"
            e.health_delay = 1.0
            (d,) = await c.sample()
            assert d.state == "unhealthy" and "did not answer" in d.message


async def test_url_specs_order_and_mixed_states() -> None:
    port = free_port()
    async with FakeEngine("vllm") as v, FakeEngine("sglang") as s:
        v.metrics = 'vllm:num_requests_running{engine="0"} 3\n'
        s.metrics = None
        specs = [
            ServerSpec.from_url(f"http://127.0.0.1:{s.port}"),
            ServerSpec.from_url(f"127.0.0.1:{port}", engine="sglang"),
            ServerSpec("v", "auto", f"http://localhost:{v.port}/"),
        ]
        async with ServerCollector(LocalHost(), specs) as c:
            got = await c.sample()
    assert [x.state for x in got] == ["ready", "down", "ready"]
    assert got[0].metrics_state == "disabled"
    assert got[2].engine == "vllm" and got[2].running == 3 and got[2].url == f"http://localhost:{v.port}"


def test_spec_validation() -> None:
    with pytest.raises(ValueError, match=re.escape("server URL 'ftp://h:1': expected an http:// or https:// URL")):
        ServerSpec.from_url("ftp://h:1")
    with pytest.raises(
        ValueError, match=re.escape("server URL 'h:0': the port is not a number from 1 to 65535")
    ):  # not port 80
        ServerSpec.from_url("h:0")
    with pytest.raises(ValueError, match="do not print") as e:
        ServerSpec.from_url("http://h\x1b[31m:1")
    assert str(e.value).isprintable()  # the escape is quoted, never sent
    with pytest.raises(ValueError, match="engine"):
        ServerSpec("x", "tgi", 8000)
    with pytest.raises(ValueError, match="port"):
        ServerSpec("x", "vllm", 70000)
    with pytest.raises(ValueError, match="needs a port"):
        ServerSpec("x", "vllm")
    assert ServerSpec.from_url("h:30000").url == "http://h:30000"


class _RemoteLike(LocalHost):
    """A host that is not local: servers must be reached through forward_port."""

    is_local = False

    def __init__(self) -> None:
        super().__init__("remote-box")
        self.forwards: list[int] = []

    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        self.forwards.append(remote_port)
        await asyncio.sleep(0.05)  # a real forward takes a round trip
        return remote_port  # loopback stands in for the tunnel


async def test_remote_servers_go_through_port_forward() -> None:
    async with FakeEngine("vllm") as e:
        e.metrics = 'vllm:num_requests_running{engine="0"} 2\n'
        host = _RemoteLike()
        specs = [ServerSpec("v", "vllm", e.port), ServerSpec.from_url(f"http://127.0.0.1:{e.port}", name="u")]
        async with ServerCollector(host, specs) as c:
            a, b = await c.sample()
            await c.sample()
    assert a.state == b.state == "ready" and a.running == 2
    assert host.forwards == [e.port]  # one forward per remote port, reused
