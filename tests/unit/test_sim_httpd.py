"""The simulator's HTTP/1.1 front end (tui/sim/httpd.py) and its pre-encoded SSE chunks (tui/sim/formats.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from tunedeck.sim.formats import WORD_TABLE_SIZE, WORDS, Formats, sse
from tunedeck.sim.httpd import Conn, HttpServer, Request

pytestmark = pytest.mark.timeout(30)


class Server:
    """An HttpServer on a loopback port whose handler is ``route`` (records what it saw)."""

    def __init__(self, route) -> None:
        self.route = route
        self.seen: list[tuple[Request, float]] = []
        self.started: list[tuple[str, int]] = []

    async def __aenter__(self) -> "Server":
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]

        def handler(req: Request, conn: Conn) -> None:
            self.seen.append((req, time.monotonic()))
            self.route(req, conn)

        self.http = HttpServer(handler, lambda req, status: self.started.append((req.path, status)))
        await self.http.start(sock)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.close()


async def read_until(reader: asyncio.StreamReader, n_marker: int, marker: bytes, timeout: float = 5.0) -> bytes:
    buf = b""
    end = time.monotonic() + timeout
    while buf.count(marker) < n_marker:
        chunk = await asyncio.wait_for(reader.read(65536), max(0.01, end - time.monotonic()))
        if not chunk:
            break
        buf += chunk
    return buf


def echo(req: Request, conn: Conn) -> None:
    conn.send_json(200, {"path": req.path, "body": req.body.decode(), "query": req.query})


async def test_keep_alive_pipelined_requests_answered_in_order():
    async with Server(echo) as s:
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(
            b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\none"
            b"GET /b?x=1&x=2 HTTP/1.1\r\nhost: x\r\n\r\n"
            b"POST /c HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\ntwo\r\n2\r\n!!\r\n0\r\n\r\n"
        )
        data = await read_until(reader, 3, b"HTTP/1.1 200 OK")
        data += await read_until(reader, 1, b'"/c"') if b'"/c"' not in data else b""
        writer.close()
    bodies = [json.loads(x[x.index(b"{") :]) for x in data.split(b"HTTP/1.1 ")[1:]]
    assert [b["path"] for b in bodies] == ["/a", "/b", "/c"]
    assert bodies[0]["body"] == "one" and bodies[1]["query"] == {"x": "2"} and bodies[2]["body"] == "two!!"
    assert b"server: uvicorn" in data and b"content-type: application/json" in data
    assert s.started == [("/a", 200), ("/b", 200), ("/c", 200)]


async def test_a_burst_is_stamped_as_read_not_as_routed():
    """Requests read in one loop turn get their arrival then, however long routing the others takes."""

    def slow(req: Request, conn: Conn) -> None:
        end = time.monotonic() + 0.02  # a route that holds the loop for 20 ms
        while time.monotonic() < end:
            pass
        conn.send(200, b"")

    async with Server(slow) as s:
        socks = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(5)]
        t_sent = time.monotonic()
        for k in socks:  # all written before the server's loop runs again
            k.sendall(b"GET /x HTTP/1.1\r\nhost: x\r\n\r\n")
        while len(s.seen) < 5:
            await asyncio.sleep(0.01)
        for k in socks:
            k.close()
    arrivals = [req.arrival for req, _ in s.seen]
    routed = [t for _, t in s.seen]
    assert all(t_sent <= a for a in arrivals)
    assert max(arrivals) - min(arrivals) < 0.04  # stamped together, as read ...
    assert routed[-1] - routed[0] >= 0.07  # ... though routed one after the other, 20 ms each
    assert all(abs(req.arrival_wall - time.time()) < 5 for req, _ in s.seen)


async def test_bad_requests_and_connection_close():
    async with Server(echo) as s:
        for raw, status in (
            (b"garbage\r\n\r\n", b"400"),
            (b"POST / HTTP/1.1\r\ncontent-length: 999999999999\r\n\r\n", b"413"),
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
            writer.write(raw)
            data = await asyncio.wait_for(reader.read(), 5)  # answered, then closed
            assert data.startswith(b"HTTP/1.1 " + status) and b"connection: close" in data
            writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(b"GET /z HTTP/1.1\r\nconnection: close\r\n\r\n")
        data = await asyncio.wait_for(reader.read(), 5)
        assert data.startswith(b"HTTP/1.1 200 OK") and b"connection: close" in data and data.endswith(b"}")
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(b"HEAD /h HTTP/1.1\r\n\r\n")
        data = await read_until(reader, 1, b"\r\n\r\n")
        assert b"content-length: " in data and data.endswith(b"\r\n\r\n")  # the length, no body
        writer.close()


async def test_stream_chunks_end_and_client_gone():
    conns: list[Conn] = []

    def stream(req: Request, conn: Conn) -> None:
        conn.start_stream()
        conn.write_chunk(b"data: 1\n\n")
        conns.append(conn)

    async with Server(stream) as s:
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(b"POST /s HTTP/1.1\r\ncontent-length: 0\r\n\r\n")
        head = await read_until(reader, 1, b"data: 1\n\n\r\n")
        assert (
            b"transfer-encoding: chunked" in head
            and b"text/event-stream" in head
            and head.endswith(b"9\r\ndata: 1\n\n\r\n")
        )
        conns[0].end_stream(b"%x\r\n%b\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n"))
        tail = await read_until(reader, 1, b"0\r\n\r\n")
        assert tail == b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
        writer.write(b"POST /s HTTP/1.1\r\ncontent-length: 0\r\n\r\n")  # the same connection serves the next one
        await read_until(reader, 1, b"data: 1\n\n\r\n")
        assert len(conns) == 2 and not conns[1].closed
        writer.close()
        end = time.monotonic() + 5
        while not conns[1].closed and time.monotonic() < end:
            conns[1].write_chunk(b"data: 2\n\n")
            await asyncio.sleep(0.02)
        assert conns[1].closed and conns[1].write_chunk(b"data: 3\n\n") is False


def _formats(engine: str) -> Formats:
    return Formats(engine, 0, "org/m%1")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("kind", ["chat", "completion"])
async def test_pre_encoded_token_chunk_is_the_engine_format(engine, kind):
    """The fast path's bytes equal the engine's chunk object, serialized like every other chunk."""
    api = _formats(engine)
    r = api.new_req(kind, stream=True, prompt_tokens=5, max_tokens=10, ignore_eos=True, conn=None)
    r.out = 2
    got = api.token_frames(r, r.wpos + 1, 1, first=False)
    word = WORDS[api.word_table[(r.wpos + 1) % WORD_TABLE_SIZE]]
    want = sse(api._chunk_obj(r, word, None))
    assert got == b"%x\r\n%b\r\n" % (len(want), want)
    assert json.loads(want[6:])["model"] == "org/m%1"
    if engine == "vllm":
        assert r.rid.startswith("chatcmpl-" if kind == "chat" else "cmpl-") and len(r.rid.split("-")[1]) == 32
    else:
        assert len(r.rid) == 32
    other = api.new_req(kind, stream=True, prompt_tokens=5, max_tokens=10, ignore_eos=True, conn=None)
    assert other.rid != r.rid


def test_pseudo_eos_is_seeded_and_log_normal_around_200():
    a, b = _formats("vllm"), _formats("vllm")
    ends = [a._pseudo_eos(n) for n in range(1, 4001)]
    assert ends == [b._pseudo_eos(n) for n in range(1, 4001)]  # the same seed, the same ends
    b.seed = 1
    assert [b._pseudo_eos(n) for n in range(1, 50)] != ends[:49]
    ends.sort()
    assert 180 <= ends[len(ends) // 2] <= 220 and min(ends) >= 1


def test_request_path_and_query():
    r = Request("GET", "/v1/models?x=1", "HTTP/1.1", {}, b"", "p")
    assert r.path == "/v1/models" and r.query == {"x": "1"}
    assert Request("GET", "http://h/health", "HTTP/1.1", {}, b"", "p").path == "/health"
