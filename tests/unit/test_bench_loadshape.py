"""A level's load shape split over worker processes: each worker's cap, rate and seed."""

import math

from tunedeck.bench.client import EndpointConfig, RequestSpec
from tunedeck.bench.config import BenchConfig
from tunedeck.bench.fanout import _worker_job
from tunedeck.bench.levels import LoadShape


def test_the_cap_is_split_with_the_remainder_to_the_first_workers():
    shape = LoadShape(concurrency=5, rate=math.inf, burstiness=0.5, seed=7, preopen=False)
    parts = [shape.share(3, w) for w in range(3)]
    assert [p.concurrency for p in parts if p] == [2, 2, 1]
    assert [p.seed for p in parts if p] == [7, 8, 9]
    assert all(p and p.rate == math.inf and p.burstiness == 0.5 and p.preopen is False for p in parts)


def test_a_worker_the_cap_leaves_without_users_gets_no_share():
    assert LoadShape(concurrency=1).share(2, 0) == LoadShape(concurrency=1)
    assert LoadShape(concurrency=1).share(2, 1) is None
    assert LoadShape(concurrency=None).share(4, 3) == LoadShape(concurrency=None, seed=3)


def test_a_finite_rate_is_split_evenly():
    assert LoadShape(rate=10.0).share(4, 2) == LoadShape(rate=2.5, seed=2)


def test_the_job_line_carries_the_share():
    cfg = BenchConfig(url="http://h:1", workers=2, warmup=3, preconnect=True, burstiness=2.0, seed=40)
    specs = [RequestSpec("p", 1, 1, i) for i in range(5)]
    ep = EndpointConfig("http://h:1", "m")
    shape = LoadShape(concurrency=3, rate=math.inf, burstiness=2.0, seed=40, preopen=True)
    jobs = [_worker_job(cfg, ep, specs, shape, 2, w) for w in range(2)]
    assert [(j["concurrency"], j["rate"], j["seed"], j["burstiness"]) for j in jobs if j] == [
        (2, "inf", 40, 2.0),
        (1, "inf", 41, 2.0),
    ]
    assert [len(j["specs"]) for j in jobs if j] == [3, 2]
    assert [j["preconnect"] for j in jobs if j] == [2, 1]
    assert [j["warmup"] for j in jobs if j] == [2, 1]
    off = _worker_job(cfg, ep, specs, LoadShape(concurrency=3, rate=8.0, preopen=False), 2, 1)
    assert off is not None and off["rate"] == 4.0 and off["preconnect"] == 0
