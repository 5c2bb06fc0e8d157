"""The status collectors over the host sampler: no command per poll on the GPU host.

:class:`SampledGpu`, :class:`SampledHost` and :class:`SampledServers` read what
the one sampler process of a host (:class:`tunedeck.services.sampler.HostSampler`)
streams, and turn it into the same snapshots as the per-command collectors
(:class:`~tunedeck.collectors.gpu.GpuCollector`, :class:`~tunedeck.collectors.hoststats.HostCollector`,
:class:`~tunedeck.collectors.sources.WatchedServers`), with the same parsers. On a host without a
usable Python (``state == "unavailable"``) each falls back to its per-command
collector, built only then.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, AsyncGenerator, Callable, Generic, Iterable, TypeVar

from tunedeck.collectors.servers import ServerCollector, ServerSpec, _Probe
from tunedeck.collectors.smi import classify_failure, join_processes, parse_compute_apps, parse_gpu_line
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.model import NA, GpuProcess, GpuStatus, HostStats, ServerStats
from tunedeck.services.sampler import HostSampler

if TYPE_CHECKING:
    from tunedeck.collectors.sources import GpuSource, HostSource, Sources, WatchedServers

log = logging.getLogger(__name__)


def gpu_status(msg: dict[str, Any], apps: dict[str, Any] | None) -> GpuStatus:
    """A GpuStatus from a sampler ``gpu`` or ``gpu_error`` line (and the newest ``apps`` line)."""
    t = float(msg.get("time") or time.time())
    if msg.get("t") == "gpu_error":
        status, text = msg.get("status"), str(msg.get("text") or "")
        f = classify_failure(status, text)
        if f is None or f[0] == "error":
            if status is None and ("No such file" in text or "not found" in text):
                f = ("no-nvidia-smi", text.strip().splitlines()[-1][:300])
            elif f is None:
                first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
                f = ("error", first[:300] or f"nvidia-smi exited (status {status})")
        state = "unresponsive" if status is None and text.startswith("no output from nvidia-smi") else f[0]
        return GpuStatus(state, message=f[1], time=t)
    gpus = tuple(g for g in (parse_gpu_line(str(r)) for r in msg.get("rows") or ()) if g is not None)
    procs: tuple[GpuProcess, ...] = ()
    if apps is not None:
        procs = join_processes(parse_compute_apps("\n".join(str(r) for r in apps.get("rows") or ())), gpus)
    return GpuStatus("ok", gpus, procs, time=t)


_S = TypeVar("_S")


class _OnSampler(Generic[_S]):
    """A source over the sampler, with its per-command ``fallback`` source (of type ``_S``) made
    the first time it is needed; closing it closes the sampler."""

    def __init__(self, sampler: HostSampler, fallback: Callable[[], _S]) -> None:
        self.sampler = sampler
        self._fallback_factory = fallback
        self.fallback: _S | None = None

    def _fallback(self) -> _S:
        if self.fallback is None:
            self.fallback = self._fallback_factory()
        return self.fallback

    async def aclose(self) -> None:
        await self.sampler.aclose()


class SampledGpu(_OnSampler["GpuSource"]):
    """A :class:`~tunedeck.collectors.sources.GpuSource` over the sampler's GPU lines."""

    def __init__(self, sampler: HostSampler, fallback: Callable[[], GpuSource], *, watchdog: float = 15.0) -> None:
        super().__init__(sampler, fallback)
        self.watchdog = watchdog

    async def stream(self) -> AsyncGenerator[GpuStatus, None]:
        s = self.sampler
        await s.wait_settled()
        seen = 0
        told = ""
        while True:
            if s.state == "unavailable":
                inner = self._fallback().stream()
                try:
                    async for status in inner:
                        yield status
                finally:
                    await inner.aclose()  # ends its nvidia-smi now, even when this one is closed
                return
            if s.state == "closed":
                return
            seq = s.seq.get("gpu", 0)
            if seq != seen and "gpu" in s.latest and s.state == "running":
                seen = seq
                told = ""
                yield gpu_status(s.latest["gpu"], s.latest.get("apps"))
            elif s.state in ("lost", "refused") and told != s.reason:
                told = s.reason
                yield GpuStatus("host-unreachable", message=f"host sampler: {s.reason}", time=time.time())
            if not await s.wait_change(self.watchdog) and s.state == "running":
                yield GpuStatus(
                    "unresponsive", message=f"no line from the host sampler for {self.watchdog:g} s", time=time.time()
                )


class SampledHost(_OnSampler["HostSource"]):
    """A :class:`~tunedeck.collectors.sources.HostSource` over the sampler's ``/proc`` lines."""

    def __init__(self, sampler: HostSampler, fallback: Callable[[], HostSource], *, timeout: float = 8.0) -> None:
        super().__init__(sampler, fallback)
        self.timeout = timeout
        self._seen = 0
        self._prev: tuple[int, int] | None = None

    async def sample(self) -> HostStats:
        from tunedeck.collectors.hoststats import cpu_percent

        s = self.sampler
        state = await s.wait_settled(self.timeout)
        target = s.host.target
        if state == "unavailable":
            return await self._fallback().sample()
        deadline = time.monotonic() + self.timeout
        while s.seq.get("host", 0) == self._seen and s.seq.get("host_error", 0) == 0 and s.state == "running":
            left = deadline - time.monotonic()
            if left <= 0 or not await s.wait_change(left):
                raise HostError("timeout", f"no host figures from the sampler for {self.timeout:g} s", target=target)
        if s.state != "running":
            raise s.error or HostError("connection-lost", f"host sampler: {s.reason or s.state}", target=target)
        err = s.latest.get("host_error")
        msg = s.latest.get("host")
        if msg is None or (err is not None and float(err.get("time", 0)) > float(msg.get("time", 0))):
            raise HostError("error", str((err or {}).get("error") or "no host figures yet"), target=target)
        self._seen = s.seq.get("host", 0)
        cpu = msg.get("cpu")
        cur = (int(cpu[0]), int(cpu[1])) if isinstance(cpu, list) and len(cpu) == 2 else None
        pct = cpu_percent(self._prev, cur)
        self._prev = cur
        raw_load = msg.get("load")
        load: list[Any] = raw_load if isinstance(raw_load, list) and len(raw_load) == 3 else [NA, NA, NA]

        def num(v: Any) -> Any:
            return v if isinstance(v, (int, float)) and not isinstance(v, bool) else NA

        return HostStats(
            hostname=str(msg.get("hostname") or target),
            cpu_percent=pct,
            cpu_count=num(msg.get("cpus")),
            mem_used=num(msg.get("mem_used")),
            mem_total=num(msg.get("mem_total")),
            load1=num(load[0]),
            load5=num(load[1]),
            load15=num(load[2]),
            uptime=num(msg.get("uptime")),
            time=float(msg.get("time") or time.time()),
        )


_SCHEME = "sampler://"


class _SampledServerCollector(ServerCollector):
    """ServerCollector whose probes of the host's own servers are the sampler's reads."""

    def __init__(self, host: Host, sampler: HostSampler, specs: Iterable[ServerSpec] = (), **kw: Any) -> None:
        super().__init__(host, specs, **kw)
        self.sampler = sampler

    async def _base_url(self, spec: ServerSpec) -> str:
        if spec.url is None and spec.port is not None and spec.run_id is not None:
            return f"{_SCHEME}{int(spec.port)}"
        return await super()._base_url(spec)

    async def _get(self, url: str, *, want_json: bool = False) -> _Probe:
        if not url.startswith(_SCHEME):
            return await super()._get(url, want_json=want_json)
        port_text, _, path = url[len(_SCHEME) :].partition("/")
        msg = self.sampler.servers.get(int(port_text))
        stale = self.probe_timeout * 2 + 3 * self.sampler.interval
        if msg is None or time.time() - float(msg.get("time", 0)) > stale:
            return _Probe(error="timeout")
        if path == "v1/models":
            model = msg.get("model")
            return _Probe(status=200, json={"data": [{"id": model}]}) if model else _Probe(error="no model yet")
        part = msg.get("health" if path == "health" else "metrics")
        if not isinstance(part, dict):  # /health refused: /metrics was not read
            return _Probe(error="refused", body="connection refused")
        return _Probe(status=part.get("status"), error=str(part.get("error") or ""), body=str(part.get("body") or ""))

    def _drop_forward(self, spec: ServerSpec) -> None:
        if spec.url is None and spec.run_id is not None:
            return  # no forward: read on the host
        super()._drop_forward(spec)


class SampledServers(_OnSampler["WatchedServers"]):
    """A :class:`~tunedeck.collectors.sources.ServerSource`: the servers of the live runs the sampler lists,
    read on the host's loopback by the sampler, plus ``extra`` specs (given by URL, probed
    from here as before)."""

    def __init__(
        self,
        host: Host,
        sampler: HostSampler,
        fallback: Callable[[], WatchedServers],
        extra: Iterable[ServerSpec] = (),
        *,
        timeout: float = 8.0,
    ) -> None:
        super().__init__(sampler, fallback)
        self.host = host
        self.extra = tuple(extra)
        self.timeout = timeout
        self.collector = _SampledServerCollector(host, sampler, self.extra)
        self._runs_seq = -1

    async def sample(self) -> tuple[ServerStats, ...]:
        from tunedeck.collectors.status import servers_of_runs, settle_ended_runs
        from tunedeck.hostops.hostruns import HostRun
        from tunedeck.hostops.startupstate import reconcile_servers

        s = self.sampler
        state = await s.wait_settled(self.timeout)
        if state == "unavailable":
            return await self._fallback().sample()
        if state != "running":
            raise s.error or HostError("connection-lost", f"host sampler: {s.reason or state}", target=self.host.target)
        seq = s.seq.get("runs", 0)
        if seq != self._runs_seq and "runs" in s.runs:
            self._runs_seq = seq
            runs = [
                HostRun(
                    str(r.get("id")),
                    r.get("pid"),
                    r.get("starttime"),
                    bool(r.get("alive")),
                    r.get("rc"),
                    int(r.get("log_size") or 0),
                    str(r.get("dir") or ""),
                    dict(meta) if isinstance(meta := r.get("meta"), dict) else {},
                )
                for r in s.runs["runs"]
            ]
            await settle_ended_runs(self.host, runs)  # a run that just died reads failed, with its cause
            names = {x.name for x in self.extra}
            known = tuple(x for x in servers_of_runs(self.host, runs) if x.name not in names)
            self.collector.set_specs(known + self.extra)
        if not self.collector.specs:
            return ()
        return reconcile_servers(await self.collector.sample())

    async def aclose(self) -> None:
        await self.collector.aclose()
        if self.fallback is not None:
            await self.fallback.aclose()
        await super().aclose()


def sampled_sources(host: Host, *, interval: float = 1.0, servers: Iterable[Any] = (), sim: bool = False) -> Sources:
    """The dashboard's sources for ``host`` over one :class:`HostSampler`; each falls back to
    its per-command collector when the host cannot run the sampler. ``sim``: a ``--sim``
    target (the sampler reads the simulated GPUs where the host has no nvidia-smi)."""
    from tunedeck.collectors.gpu import GpuCollector
    from tunedeck.collectors.hoststats import HostCollector
    from tunedeck.collectors.sources import Sources, WatchedServers

    sampler = HostSampler(host, interval=interval, sim=sim)
    extra = tuple(servers)
    return Sources(
        gpu=SampledGpu(sampler, lambda: GpuCollector(host, interval=interval)),
        host=SampledHost(sampler, lambda: HostCollector(host)),
        servers=SampledServers(host, sampler, lambda: WatchedServers(host, extra), extra),
    )
