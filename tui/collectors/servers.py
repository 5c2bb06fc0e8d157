"""Server collector: SGLang and vLLM servers seen through their HTTP endpoints.

Each :meth:`ServerCollector.sample` probes every server concurrently with
short per-probe timeouts: ``/health`` for the state, ``/v1/models`` for the
model name (once), ``/metrics`` for the load figures. A remote server is
reached through ``host.forward_port``.

States: ``ready`` (``/health`` 200), ``starting`` (SGLang 503 before it was
ever ready; a probe timeout before ready, since vLLM binds its port before
loading), ``unhealthy`` (503 or timeout after it was ready, vLLM 503 =
engine dead, other HTTP errors), ``down`` (connection refused, forward
failed). ``metrics_state`` is ``ok``, ``disabled`` (``/metrics`` 404: SGLang
without ``--enable-metrics``), ``error`` or ``none`` (not probed: down).

Windowed figures use the previous scrape: vLLM generation throughput is
the rate of ``vllm:generation_tokens_total``; TTFT p50/mean come from the
histogram bucket deltas (on the first scrape: since the server started);
vLLM speculative acceptance is accepted/draft token deltas.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from tunedeck.bench import http, httpcore
from tunedeck.collectors import prom
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.model import NA, Num, ServerStats
from tunedeck.util.safety import safe_line

ENGINES = ("sglang", "vllm", "auto")
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0")
#: the most of a probe's answer read (an engine's /metrics is tens of KB; a hostile one is cut here)
BODY_LIMIT = 8 << 20


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """A server to watch: on the target host by ``port``, or by ``url``.

    ``ServerSpec("a", "vllm", 8000)`` or ``ServerSpec("b", "auto", "http://h:30000")``.
    ``engine`` is ``sglang``, ``vllm`` or ``auto`` (detected from the metric names).
    A loopback ``url`` on a remote host means the host's loopback (port-forwarded).
    """

    name: str
    engine: str = "auto"
    port: int | None = None
    run_id: str | None = None
    model: str = ""
    url: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.port, str):
            object.__setattr__(self, "url", self.port)
            object.__setattr__(self, "port", None)
        if self.engine not in ENGINES:
            raise ValueError(f"server {self.name!r}: unknown engine {self.engine!r} (sglang, vllm or auto)")
        if self.url is not None:
            scheme, host, port = split_url(self.url)
            object.__setattr__(self, "url", f"{scheme}://{_bracket(host)}:{port}")
            if self.port is None and host in _LOOPBACK:
                object.__setattr__(self, "port", port)
        elif self.port is None:
            raise ValueError(f"server {self.name!r}: needs a port or a URL")
        elif not (0 < int(self.port) < 65536):
            raise ValueError(f"server {self.name!r}: invalid port {self.port!r}")

    @classmethod
    def from_url(cls, url: str, engine: str = "auto", name: str | None = None) -> "ServerSpec":
        _scheme, host, port = split_url(url)
        return cls(name or f"{host}:{port}", engine, None, url=url)


def split_url(url: str) -> httpcore.Origin:
    """(scheme, host, port) of a server's URL, read as the benchmark's client reads it; a bare
    ``host:port`` means http. ValueError naming the problem."""
    if not isinstance(url, str):
        raise ValueError(f"server URL {url!r}: not text")
    try:
        origin, _target = httpcore.split_url(url if "://" in url else f"http://{url}")
    except httpcore.InvalidURL as e:
        raise ValueError(f"server URL {url!r}: {e.reason}") from None
    return origin


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass
class _Prev:
    t: float
    gen_total: float | None
    ttft: prom.Histogram | None
    accepted: float | None
    drafts: float | None


def _na(v: float | None) -> Num:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return NA
    return v


@dataclass
class _Probe:
    status: int | None = None  # HTTP status, None = no answer
    error: str = ""  # "refused" | "timeout" | text
    body: str = ""
    json: Any = None


@dataclass
class _ServerState:
    seen_ready: bool = False
    engine: str = ""
    model: str = ""
    prev: _Prev | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the last /metrics text and its parse: an idle server answers the same text every second
    metrics_text: str = ""
    metrics: prom.Metrics | None = None


class ServerCollector:
    """``await ServerCollector(host, specs).sample()`` -> ``tuple[ServerStats, ...]`` (same order as specs).

    Never raises for server or link failures: they are states. Call
    :meth:`aclose` when done (closes the HTTP client).
    """

    def __init__(
        self,
        host: Host,
        specs: Iterable[ServerSpec] = (),
        *,
        probe_timeout: float = 2.0,
        connect_timeout: float = 1.0,
    ) -> None:
        self.host = host
        self.specs: tuple[ServerSpec, ...] = tuple(specs)
        self.probe_timeout = probe_timeout
        self.connect_timeout = connect_timeout
        self._client: http.HttpClient | None = None
        self._state: dict[str, _ServerState] = {}
        self._forwards: dict[tuple[str, int], int] = {}
        self._forward_lock = asyncio.Lock()

    def set_specs(self, specs: Iterable[ServerSpec]) -> None:
        """Replace the watched servers (state is kept for names still present)."""
        self.specs = tuple(specs)
        names = {s.name for s in self.specs}
        for gone in [n for n in self._state if n not in names]:
            del self._state[gone]

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> "ServerCollector":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _http(self) -> http.HttpClient:
        # the benchmark's own client (standard library, keep-alive): a probe a second costs a
        # fraction of what a general-purpose client costs, and one client serves everything
        if self._client is None:
            self._client = http.HttpClient(
                read_timeout=self.probe_timeout, connect_timeout=self.connect_timeout, write_timeout=self.probe_timeout
            )
        return self._client

    async def sample(self) -> tuple[ServerStats, ...]:
        if not self.specs:
            return ()
        return tuple(await asyncio.gather(*(self._sample_one(s) for s in self.specs)))

    # ------------------------------------------------------------------ one server
    async def _base_url(self, spec: ServerSpec) -> str:
        if spec.url is not None:
            scheme, host, port = split_url(spec.url)
            if self.host.is_local or host not in _LOOPBACK:
                return spec.url
            remote_port = port
        else:
            scheme, remote_port = "http", int(spec.port)  # type: ignore[arg-type]
            if self.host.is_local:
                return f"http://127.0.0.1:{remote_port}"
        key = ("127.0.0.1", remote_port)
        async with self._forward_lock:  # one forward per remote port, even when probed concurrently
            local = self._forwards.get(key)
            if local is None:
                try:
                    local = await asyncio.wait_for(self.host.forward_port(remote_port), self.probe_timeout + 5)
                except asyncio.TimeoutError:
                    raise HostError("timeout", f"port forward to {remote_port} did not open") from None
                self._forwards[key] = local
        return f"{scheme}://127.0.0.1:{local}"

    def _drop_forward(self, spec: ServerSpec) -> None:
        """Forget a port forward after a refused probe (the tunnel may be stale): re-forward next time."""
        if self.host.is_local:
            return
        port = spec.port
        if spec.url is not None:
            _, host, port = split_url(spec.url)
            if host not in _LOOPBACK:
                return
        self._forwards.pop(("127.0.0.1", int(port)), None)  # type: ignore[arg-type]

    async def _get(self, url: str, *, want_json: bool = False) -> _Probe:
        try:
            r = await self._http().request("GET", url, timeout=self.probe_timeout, limit=BODY_LIMIT)
        except httpcore.ConnectTimeout:
            return _Probe(error="timeout")
        except httpcore.ConnectError as exc:
            return _Probe(error="refused", body=_connect_reason(exc))
        except httpcore.TimeoutException:
            return _Probe(error="timeout")
        except httpcore.HTTPError as exc:
            return _Probe(error=f"{type(exc).__name__}: {exc}"[:200] or type(exc).__name__)
        except OSError as exc:
            return _Probe(error=str(exc)[:200])
        body = (r.content or b"").decode("utf-8", "replace")
        p = _Probe(status=r.status, body=body if not want_json else "")
        if want_json and r.status == 200:
            try:
                p.json = json.loads(body)
            except ValueError:
                p.json = None
        return p

    async def _sample_one(self, spec: ServerSpec) -> ServerStats:
        st = self._state.setdefault(spec.name, _ServerState())
        now = time.time()
        shown_url = spec.url or f"http://127.0.0.1:{spec.port}"
        engine = spec.engine if spec.engine != "auto" else (st.engine or "auto")
        base: dict[str, Any] = dict(name=spec.name, url=shown_url, port=spec.port, run_id=spec.run_id, time=now)
        try:
            root = await self._base_url(spec)
        except (HostError, OSError, ValueError) as exc:
            return ServerStats(
                engine=engine,
                state="down",
                model=st.model or spec.model,
                metrics_state="none",
                message=f"port forward failed: {exc}",
                **base,
            )
        want_models = not (st.model or spec.model)
        health_p, metrics_p, models_p = await asyncio.gather(
            self._get(root + "/health"),
            self._get(root + "/metrics"),
            self._get(root + "/v1/models", want_json=True) if want_models else _noop(),
        )
        # ---- state
        message = ""
        if health_p.status == 200:
            state = "ready"
            st.seen_ready = True
        elif health_p.error == "refused":
            state, message = "down", health_p.body or "connection refused"
            st.prev = None
            self._drop_forward(spec)
        elif health_p.error == "timeout":
            if st.seen_ready:
                state, message = "unhealthy", f"/health did not answer within {self.probe_timeout:g} s"
            else:
                state, message = "starting", "not answering yet (loading?)"
        elif health_p.status == 503:
            if engine == "vllm" and st.seen_ready:
                state, message = "unhealthy", "/health 503: engine dead"
            elif st.seen_ready:
                state, message = "unhealthy", "/health 503"
            else:
                state, message = "starting", "/health 503 (starting)"
        elif health_p.status is not None:
            state, message = "unhealthy", f"/health returned HTTP {health_p.status}"
        else:
            state, message = "down", health_p.error or "no answer"
        # ---- model
        if models_p is not None and isinstance(models_p.json, dict):
            data = models_p.json.get("data") or []
            if data and isinstance(data[0], dict) and data[0].get("id"):
                st.model = safe_line(str(data[0]["id"]))
        model = st.model or spec.model
        if state == "down":
            if engine == "auto":
                engine = "unknown"
            return ServerStats(engine=engine, state=state, model=model, metrics_state="none", message=message, **base)
        # ---- metrics
        figures: dict[str, Num] = {}
        metrics_state = "ok"
        if metrics_p.status == 200:
            if st.metrics is None or metrics_p.body != st.metrics_text:
                st.metrics_text, st.metrics = metrics_p.body, prom.parse(metrics_p.body)
            m = st.metrics
            detected = _detect_engine(m)
            if detected:  # the metric names are authoritative
                st.engine = detected
                engine = detected
            figures = self._figures(m, engine, st, time.monotonic())
        elif metrics_p.status == 404:
            metrics_state = "disabled"
            note = (
                "no /metrics: start SGLang with --enable-metrics"
                if engine in ("sglang", "auto")
                else "/metrics not found"
            )
            message = f"{message}; {note}" if message else note
        else:
            metrics_state = "error"
            why = f"HTTP {metrics_p.status}" if metrics_p.status is not None else metrics_p.error
            if state == "ready" or not message:
                message = f"{message}; /metrics: {why}" if message else f"/metrics: {why}"
        if engine == "auto":
            engine = "unknown"
        return ServerStats(
            engine=engine,
            state=state,
            model=model,
            metrics_state=metrics_state,
            message=message,
            **figures,  # type: ignore[arg-type]  # the figures' names are ServerStats fields
            **base,
        )

    @staticmethod
    def _figures(m: prom.Metrics, engine: str, st: _ServerState, now: float) -> dict[str, Num]:
        out: dict[str, Num] = {}
        prev = st.prev
        if engine == "sglang":
            out["running"] = _na(m.sum("sglang:num_running_reqs"))
            out["waiting"] = _na(m.sum("sglang:num_queue_reqs"))
            out["kv_cache_usage"] = _na(m.mean("sglang:token_usage"))
            out["gen_throughput"] = _na(m.sum("sglang:gen_throughput"))
            out["spec_accept_rate"] = _na(m.mean("sglang:spec_accept_rate"))
            ttft = m.histogram("sglang:time_to_first_token_seconds")
            gen_total = m.sum("sglang:generation_tokens_total")
            accepted = drafts = None
        else:
            out["running"] = _na(m.sum("vllm:num_requests_running"))
            out["waiting"] = _na(m.sum("vllm:num_requests_waiting"))
            out["kv_cache_usage"] = _na(m.first("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", agg="mean"))
            ttft = m.histogram("vllm:time_to_first_token_seconds")
            gen_total = m.sum("vllm:generation_tokens_total")
            accepted = m.sum("vllm:spec_decode_num_accepted_tokens_total")
            drafts = m.sum("vllm:spec_decode_num_draft_tokens_total")
            rate: Num = NA
            if prev is not None and gen_total is not None and prev.gen_total is not None:
                dt = now - prev.t
                dtok = gen_total - prev.gen_total
                if dt > 0 and dtok >= 0:
                    rate = dtok / dt
            out["gen_throughput"] = rate
            acc: Num = NA
            if accepted is not None and drafts is not None:
                da, dd = accepted, drafts
                if prev is not None and prev.accepted is not None and prev.drafts is not None:
                    if accepted >= prev.accepted and drafts >= prev.drafts:
                        da, dd = accepted - prev.accepted, drafts - prev.drafts
                acc = da / dd if dd > 0 else NA
            out["spec_accept_rate"] = acc
        if ttft is not None:
            window = ttft.minus(prev.ttft if prev is not None else None)
            if window.count > 0:
                out["ttft_p50"] = _na(window.quantile(0.5))
                out["ttft_mean"] = _na(window.mean())
        st.prev = _Prev(now, gen_total, ttft, accepted, drafts)
        return out


def _connect_reason(exc: BaseException) -> str:
    """'connection refused' when that is the cause, else the error text."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 8:
        if isinstance(e, ConnectionRefusedError) or "refused" in str(e).lower():
            return "connection refused"
        e = e.__cause__ or e.__context__
        seen += 1
    return f"cannot connect: {exc}"[:200]


async def _noop() -> None:
    return None


def _detect_engine(m: prom.Metrics) -> str:
    for s in m.samples:
        if s.name.startswith("sglang:"):
            return "sglang"
        if s.name.startswith("vllm:"):
            return "vllm"
    return ""
