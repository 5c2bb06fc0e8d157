"""A fake OpenAI-compatible SSE server for benchmark tests (FAKESRV in reliability.md §6).

Runs as its own process (so its timing never shares an event loop with the
client) on loopback, HTTP/1.1 with chunked transfer encoding like uvicorn:

    python tests/fakesrv.py --port 0 --ttft-ms 50 --itl-ms 10 [--pattern ok,e500,cut,malformed,slowfirst]
                            [--refuse-until S] [--procs N]

Prints ``PORT <n>`` on stdout once the port is chosen. Request ``i`` (a
per-process counter) gets mode ``pattern[i % len(pattern)]``; a request
header ``x-fake-mode`` overrides it. Modes:

* ``ok``: first token after ``--ttft-ms``, then one token per ``--itl-ms``,
  each token one write (absolute schedule, so the mean gap is exact); with
  ``--itl-ms 0`` tokens are written in bursts of ``--burst`` per write.
* ``e500``: HTTP 500 with a JSON error body.
* ``cut``: half of the tokens, then the connection is aborted.
* ``malformed``: a ``data: {not json`` line in the middle of a normal stream.
* ``slowfirst``: the first token after ``--slowfirst-s`` seconds.

``--record FILE`` appends every completion request (arrival time, path, body)
to FILE; ``--tag-tokens`` makes token texts `` r<request>t<k>``;
``--counters vllm|sglang|sglang-gauges`` serves ``/metrics`` with prefix-cache
and speculative counters that start at lifetime values and move with each
request (per request: queries += 2 × prompt words, hits += prompt words;
drafts += n, draft tokens += 3n, accepted at positions 0/1/2 += n, n/2, 0).

Every token chunk carries ``"tw"``: ``time.perf_counter()`` just before its
write and ``"tr"``: when the request was parsed (CLOCK_MONOTONIC, comparable across processes on Linux), so a client
can measure its timestamp lag. ``GET /stats`` returns request and token
counts summed over all server processes. ``GET /health`` and ``/v1/models``
answer like vLLM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import time
from multiprocessing.sharedctypes import RawArray
from pathlib import Path
from typing import Any

_pc = time.perf_counter
#: per-process counters: requests, tokens, Σ realized TTFT, n, Σ realized gap, n
NSTAT = 6


class Cfg:
    ttft = 0.05
    itl = 0.01
    slowfirst = 2.0
    pattern: list[str] = ["ok"]
    model = "fake-model"
    burst = 32
    stats: Any = None  # RawArray: [requests, tokens] per process
    slot = 0
    #: --record: each request body with its arrival time appended here (JSON lines)
    record: Any = None
    #: --tag-tokens: token texts name the request and position (" r<req>t<k>"), so answers are told apart
    tag_tokens = False
    #: --counters: the /metrics counter set served (none, vllm, sglang, sglang-gauges), moved by each request
    counters = "none"
    #: the counters' values (lifetime values before the first request, so a difference is needed)
    cnt: dict[str, float] = {}


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Handler(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = b""
        self.t: asyncio.Transport | None = None
        self.busy = False
        self.handles: list[asyncio.TimerHandle] = []
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for h in self.handles:
            h.cancel()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._try()

    def _try(self) -> None:
        if self.busy:
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].decode("latin-1").split("\r\n")
        headers = {}
        for line in head[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0") or 0)
        if len(self.buf) < end + 4 + n:
            return
        body = self.buf[end + 4 : end + 4 + n]
        self.buf = self.buf[end + 4 + n :]
        method, path, _ = head[0].split(" ", 2)
        self.busy = True
        self.route(method, path, headers, body)

    # ------------------------------------------------------------ responses
    def simple(self, status: int, obj: Any, reason: str = "OK") -> None:
        data = json.dumps(obj).encode()
        assert self.t is not None
        self.t.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (status, reason.encode(), len(data), data)
        )
        self.done()

    def done(self) -> None:
        self.busy = False
        self.handles = []
        if self.buf:
            self._try()

    def route(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        if method == "GET" and path == "/health":
            return self.simple(200, {})
        if method == "GET" and path == "/v1/models":
            return self.simple(200, {"object": "list", "data": [{"id": Cfg.model, "object": "model"}]})
        if method == "GET" and path == "/metrics" and Cfg.counters != "none":
            return self.metrics()
        if method == "GET" and path == "/stats":
            st = Cfg.stats
            tot = [sum(st[i] for i in range(k, len(st), NSTAT)) for k in range(NSTAT)]
            return self.simple(
                200,
                {
                    "requests": tot[0],
                    "tokens": tot[1],
                    "mean_ttft_ms": tot[2] / tot[3] * 1000 if tot[3] else None,
                    "mean_itl_ms": tot[4] / tot[5] * 1000 if tot[5] else None,
                },
            )
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            try:
                req = json.loads(body)
            except ValueError:
                return self.simple(400, {"error": {"message": "bad json"}}, "Bad Request")
            Cfg.stats[Cfg.slot * NSTAT] += 1
            if Cfg.record is not None:
                Cfg.record.write(json.dumps({"t": _pc(), "path": path, "body": req}) + "\n")
                Cfg.record.flush()
            mode = headers.get("x-fake-mode") or Cfg.pattern[int(Cfg.stats[Cfg.slot * NSTAT] - 1) % len(Cfg.pattern)]
            return self.stream(req, mode, chat=path.endswith("chat/completions"))
        return self.simple(404, {"error": {"message": "not found"}}, "Not Found")

    def metrics(self) -> None:
        c = Cfg.cnt
        lab = '{model_name="%s",engine="0"}' % Cfg.model
        if Cfg.counters == "vllm":
            lines = [
                "# TYPE vllm:prefix_cache_queries_total counter",
                f"vllm:prefix_cache_queries_total{lab} {c['queries']}",
                f"vllm:prefix_cache_hits_total{lab} {c['hits']}",
                f"vllm:spec_decode_num_drafts_total{lab} {c['drafts']}",
                f"vllm:spec_decode_num_draft_tokens_total{lab} {c['draft_tokens']}",
                f"vllm:spec_decode_num_accepted_tokens_total{lab} {c['pos0'] + c['pos1'] + c['pos2']}",
            ] + [
                'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="%s",position="%d"} %s'
                % (Cfg.model, i, c[f"pos{i}"])
                for i in range(3)
            ]
        elif Cfg.counters == "sglang":
            lines = [
                f"sglang:prompt_tokens_total{lab} {c['queries']}",
                f"sglang:cached_tokens_total{lab} {c['hits']}",
                f"sglang:cache_hit_rate{lab} 0.9",
                f"sglang:spec_accept_length{lab} 3.25",
            ]
        else:  # sglang-gauges: an SGLang without the counters
            lines = [f"sglang:cache_hit_rate{lab} 0.75", f"sglang:spec_accept_length{lab} 2.5"]
        data = ("\n".join(lines) + "\n").encode()
        assert self.t is not None
        self.t.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s" % (len(data), data))
        self.done()

    def stream(self, req: dict[str, Any], mode: str, *, chat: bool) -> None:
        assert self.t is not None
        t_rx = _pc()
        if mode == "e500":
            return self.simple(
                500, {"error": {"message": "injected failure", "type": "InternalServerError"}}, "Internal Server Error"
            )
        n = int(req.get("max_completion_tokens") or req.get("max_tokens") or 16)
        prompt = req.get("prompt") if not chat else " ".join(m.get("content", "") for m in req.get("messages", []))
        plen = len(str(prompt).split())
        reqno = int(Cfg.stats[Cfg.slot * NSTAT])
        c = Cfg.cnt
        if c:
            # per request: half of the prompt tokens hit the cache; n drafts of 3 tokens, 1.5 accepted each
            c["queries"] += 2 * plen
            c["hits"] += plen
            c["drafts"] += n
            c["draft_tokens"] += 3 * n
            c["pos0"] += n
            c["pos1"] += n / 2
        self.t.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        loop = asyncio.get_running_loop()
        model = json.dumps(Cfg.model)
        if chat:
            pre = (
                '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":%s,'
                '"choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":' % model
            )
        else:
            pre = (
                '{"id":"cmpl-1","object":"text_completion","created":0,"model":%s,'
                '"choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":' % model
            )
        tail_fmt = '}],"tr":%.7f,"tw":%%.7f}' % t_rx
        usage = (
            'data: {"id":"x","object":"x","created":0,"model":%s,"choices":[],'
            '"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}}\n\n' % (model, plen, plen + n, n)
        ).encode()
        cut_at = n // 2 if mode == "cut" else -1
        bad_at = n // 2 if mode == "malformed" else -1
        ttft = Cfg.slowfirst if mode == "slowfirst" else Cfg.ttft
        itl = Cfg.itl
        t_start = loop.time()
        write = self.t.write
        stats = Cfg.stats
        slot1 = Cfg.slot * NSTAT + 1
        last = [0.0]

        if chat:
            # role-only opening chunk, sent at once like vLLM
            write(
                _chunk(
                    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":%s,'
                    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
                    % model.encode()
                )
            )

        def token(k: int) -> bytes:
            fr = '"length"' if k == n - 1 else "null"
            tw = _pc()
            if Cfg.tag_tokens:
                return ("data: " + (pre + fr).replace(" tok", f" r{reqno}t{k}") + tail_fmt % tw + "\n\n").encode()
            if k == 0:
                stats[slot1 + 1] += tw - t_rx
                stats[slot1 + 2] += 1
            else:
                stats[slot1 + 3] += tw - last[0]
                stats[slot1 + 4] += 1
            last[0] = tw
            return ("data: " + pre + fr + tail_fmt % tw + "\n\n").encode()

        def finish() -> None:
            write(_chunk(usage) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            self.done()

        def step(k: int) -> None:
            if self.closed:
                return
            if k == cut_at:
                self.t.abort()
                return
            if itl <= 0:
                end = min(n, k + Cfg.burst)
                if cut_at >= 0:
                    end = min(end, cut_at)
                parts = []
                for j in range(k, end):
                    if j == bad_at:
                        parts.append(_chunk(b"data: {not json\n\n"))
                    parts.append(_chunk(token(j)))
                write(b"".join(parts))
                stats[slot1] += end - k
                if end >= n:
                    finish()
                else:
                    self.handles.append(loop.call_soon(step, end))
                return
            if k == bad_at:
                write(_chunk(b"data: {not json\n\n"))
            write(_chunk(token(k)))
            stats[slot1] += 1
            if k + 1 >= n:
                finish()
                return
            self.handles = [loop.call_at(t_start + ttft + (k + 1) * itl, step, k + 1)]

        if n <= 0:
            finish()
            return
        self.handles = [loop.call_at(t_start + ttft, step, 0)]


async def serve(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Handler, sock=sock, backlog=4096)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    server.close()


def _run(sock: socket.socket) -> None:
    import uvloop  # a dependency of tunedeck on POSIX, so always here for the tests

    uvloop.run(serve(sock))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--slowfirst-s", type=float, default=2.0)
    ap.add_argument("--pattern", default="ok")
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--refuse-until", type=float, default=0.0, help="seconds before the port listens")
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--burst", type=int, default=32)
    ap.add_argument("--record", default=None, help="append each request body to this JSONL file")
    ap.add_argument("--tag-tokens", action="store_true")
    ap.add_argument("--counters", default="none", choices=["none", "vllm", "sglang", "sglang-gauges"])
    a = ap.parse_args(argv)
    Cfg.record = open(a.record, "a", encoding="utf-8") if a.record else None  # noqa: SIM115 - open for the life of the server
    Cfg.tag_tokens = a.tag_tokens
    Cfg.counters = a.counters
    if a.counters in ("vllm", "sglang"):
        Cfg.cnt = {"queries": 100.0, "hits": 100.0, "drafts": 40.0, "draft_tokens": 120.0}
        Cfg.cnt.update(pos0=40.0, pos1=40.0, pos2=40.0)
    Cfg.ttft = a.ttft_ms / 1000
    Cfg.itl = a.itl_ms / 1000
    Cfg.slowfirst = a.slowfirst_s
    Cfg.pattern = [p.strip() for p in a.pattern.split(",") if p.strip()]
    Cfg.model = a.model
    Cfg.burst = a.burst
    Cfg.stats = RawArray("d", NSTAT * a.procs)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", a.port))
    port = sock.getsockname()[1]
    if a.refuse_until > 0:
        print(f"PORT {port}", flush=True)
        time.sleep(a.refuse_until)  # bound but not listening: connections are refused
    sock.listen(4096)
    if a.refuse_until <= 0:
        print(f"PORT {port}", flush=True)  # only once connections are accepted
    sock.setblocking(False)
    children = []
    for i in range(1, a.procs):
        pid = os.fork()
        if pid == 0:
            Cfg.slot = i
            _run(sock)
            os._exit(0)
        children.append(pid)
    try:
        _run(sock)
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            except OSError:
                pass
    return 0


# ---------------------------------------------------------------- pytest helper


class FakeServer:
    """Start ``tests/fakesrv.py`` in its own process; ``with FakeServer(...) as srv: srv.url``."""

    def __init__(self, *args: str, wait_port: bool = True) -> None:
        self.args = list(args)
        self.proc: Any = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "FakeServer":
        import subprocess

        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *self.args],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.close()
            raise RuntimeError(f"fake server did not start: {line!r}")
        self.port = int(line.split()[1])
        return self

    def stats(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(self.url + "/stats", timeout=5) as r:
            return json.loads(r.read())

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(5)
            except Exception:  # noqa: BLE001
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    raise SystemExit(main())
