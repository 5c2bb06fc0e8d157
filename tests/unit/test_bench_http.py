"""tunedeck.bench.http against small real servers on loopback."""

import asyncio
import json

import pytest

from tunedeck.bench.http import HttpClient
from tunedeck.bench.httpcore import (
    ConnectError,
    InvalidURL,
    ReadTimeout,
    RemoteProtocolError,
    split_url,
)
from tunedeck.util import http as control_http


class Srv:
    """A raw asyncio server: ``handler(request_head_bytes, reader, writer)`` answers each request."""

    def __init__(self, handler):
        self.handler = handler
        self.heads = []
        self.conns = 0

    async def __aenter__(self):
        async def serve(r, w):
            self.conns += 1
            try:
                while True:
                    head = await r.readuntil(b"\r\n\r\n")
                    self.heads.append(head)
                    n = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            n = int(line.split(b":")[1])
                    body = await r.readexactly(n) if n else b""
                    if await self.handler(head, body, w) == "close":
                        break
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                w.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        self.url = "http://127.0.0.1:%d" % self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()


def test_split_url_names_what_is_wrong():
    o, t = split_url("http://h:81/a?b=1")
    assert (o.scheme, o.host, o.port, t) == ("http", "h", 81, "/a?b=1")
    assert split_url("https://[::1]/")[0].host_header() == "[::1]"
    for bad, word in (
        ("ftp://h", "http"),
        ("http://", "no host"),
        ("http://h:0", "the port is not a number from 1 to 65535"),
        ("http://h:x", "the port is not a number"),
        ("http://h:99999", "the port is not a number"),
        ("http://h:1/a b", "white space"),
        ("http://h\t:1", "white space"),  # urlsplit would drop the tab without a word
        ("http://h:1/\x1b[31m", "do not print"),
        ("http://h:1/\x9b31m", "do not print"),  # the 8-bit CSI
        ("http://h:1/\u202egnp.x", "do not print"),  # a right-to-left override shows another URL
    ):
        with pytest.raises(InvalidURL, match=word):
            split_url(bad)


@pytest.mark.timeout(20)
async def test_keep_alive_lengths_headers_and_json():
    async def h(head, body, w):
        if head.startswith(b"POST"):
            data = json.dumps({"echo": json.loads(body)}).encode()
        else:
            data = b'{"ok": true}'
        w.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(data), data)
        )

    async with Srv(h) as srv, HttpClient(headers={"x-a": "1"}) as c:
        for _ in range(3):
            r = await c.get(srv.url + "/v1/models")
            assert r.status == 200 and r.json() == {"ok": True} and r.header("Content-Type") == "application/json"
        r = await c.post_json(srv.url + "/tokenize", {"n": 1})
        assert r.json() == {"echo": {"n": 1}}
        assert c.connections_opened == 1 and srv.conns == 1  # one keep-alive connection for all four
    head = srv.heads[0].decode()
    assert head.startswith("GET /v1/models HTTP/1.1\r\n") and "host: 127.0.0.1:" in head and "x-a: 1" in head


@pytest.mark.timeout(20)
async def test_stale_connection_is_retried_and_close_delimited_body_is_read():
    async def h(head, body, w):
        if b"/close-delimited" in head:
            w.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
            await w.drain()
            return "close"
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await w.drain()
        return "close"  # the server drops the keep-alive connection right after answering

    async with Srv(h) as srv, HttpClient() as c:
        assert (await c.get(srv.url + "/a")).content == b"ok"
        await asyncio.sleep(0.05)
        assert (await c.get(srv.url + "/b")).content == b"ok"  # a fresh connection, no error
        assert (await c.get(srv.url + "/close-delimited")).content == b"all of it"


@pytest.mark.timeout(20)
async def test_chunked_stream_timestamps_and_read_timeout():
    async def h(head, body, w):
        w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for piece in (b"abc", b"defg"):
            w.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await w.drain()
            await asyncio.sleep(0.05)
        if b"/hang" in head:
            await asyncio.sleep(5)
        w.write(b"0\r\n\r\n")

    async with Srv(h) as srv, HttpClient(read_timeout=0.5) as c:
        r = await c.send(c.build("GET", srv.url + "/ok"))
        got = []
        while True:
            batch = await r.next_batch()
            if batch is None:
                break
            got.extend(batch)
        assert b"".join(b for _t, b in got) == b"abcdefg"
        times = [t for t, _b in got]
        assert times == sorted(times) and times[-1] - times[0] > 0.03  # stamped on arrival, not at the end
        r = await c.send(c.build("GET", srv.url + "/hang"))
        with pytest.raises(ReadTimeout):
            while await r.next_batch() is not None:
                pass


@pytest.mark.timeout(20)
async def test_warm_pool_connect_errors_and_cut_bodies():
    async def h(head, body, w):
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort")
        await w.drain()
        return "close"

    async with Srv(h) as srv, HttpClient() as c:
        times = await c.warm(srv.url + "/v1/completions", 5)
        assert len(times) == 5 and all(t > 0 for t in times) and c.idle_count(srv.url) == 5
        assert await c.warm(srv.url, 5) == []  # already there
        with pytest.raises(RemoteProtocolError, match="complete message body"):
            await c.get(srv.url + "/x")
    async with HttpClient(connect_timeout=2) as c:
        with pytest.raises(ConnectError, match=r"127\.0\.0\.1:9"):
            await c.get("http://127.0.0.1:9/")


@pytest.mark.timeout(20)
async def test_write_now_goes_out_on_an_idle_connection_and_reads_fire_the_gate():
    """A request written from a callback: at once on an idle connection (no await), None when
    none is idle; every read and every batch handed over checks the gate, which fires once due."""
    import time

    async def h(head, body, w):
        w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b"0\r\n\r\n")

    fired: list[float] = []
    async with Srv(h) as srv, HttpClient() as c:
        req = c.build("POST", srv.url + "/v1/completions", b"{}")
        assert c.write_now(req) is None  # nothing idle: the caller goes the long way
        await c.warm(srv.url, 1)
        w = c.write_now(req)
        assert w is not None and w.sent <= w.written and c.idle_count(srv.url) == 0
        assert c.write_now(req) is None
        due = time.perf_counter()
        c.gate.arm(due, fired.append)
        r = await c.response(req, w)
        assert r.status == 200 and r.sent == w.sent
        assert fired and fired[0] >= due  # the response head's read fired it
        n = len(fired)
        assert await r.next_batch() is not None
        assert len(fired) > n  # so did the batch handed over
        c.gate.disarm()
        n = len(fired)
        while await r.next_batch() is not None:
            pass
        assert len(fired) == n and not c.gate.armed
        assert c.idle_count(srv.url) == 1  # back in the pool once the body ended


async def test_send_turns_spread_a_burst_over_loop_iterations():
    """At most sends_per_tick requests start writing per event-loop iteration; the rest pass in
    the following iterations, in order, so reads are handled between the parts of a burst."""
    import asyncio

    from tunedeck.bench.http import HttpClient

    c = HttpClient()
    c.sends_per_tick = 2
    tick = 0
    passed: list[tuple[int, int]] = []

    async def ticker() -> None:
        nonlocal tick
        while True:
            await asyncio.sleep(0)
            tick += 1

    t = asyncio.ensure_future(ticker())

    async def one(i: int) -> None:
        await c.send_turn()
        passed.append((i, tick))

    await asyncio.gather(*(one(i) for i in range(6)))
    t.cancel()
    assert [i for i, _ in passed] == list(range(6))
    ticks = [k for _, k in passed]
    assert ticks[0] == ticks[1] < ticks[2] == ticks[3] < ticks[4] == ticks[5], passed
    c.sends_per_tick = 0  # no limit: all in one iteration
    passed.clear()
    t = asyncio.ensure_future(ticker())
    await asyncio.gather(*(one(i) for i in range(6)))
    t.cancel()
    assert len({k for _, k in passed}) == 1


async def test_sleep_until_is_never_early_and_not_late_by_a_timer_tick():
    import asyncio
    import statistics
    import time

    from tunedeck.bench.levels import sleep_until

    # against a plain asyncio.sleep taken turn about, so other load on the machine delays both
    # alike (a 2-core machine beside a CPU hog made even the median several ms late)
    late, plain = [], []
    for _ in range(20):
        due = time.perf_counter() + 0.004
        await sleep_until(due)
        late.append(time.perf_counter() - due)
        due = time.perf_counter() + 0.004
        await asyncio.sleep(0.004)
        plain.append(time.perf_counter() - due)
    assert min(late) >= 0
    assert statistics.median(late) <= statistics.median(plain) + 0.0005, (late, plain)


@pytest.mark.timeout(20)
async def test_both_clients_read_a_chunked_body_with_the_one_dechunker():
    """The benchmark client and the one-shot control call (``tunedeck.util.http``) share one de-chunker:
    the same body decodes the same, and a malformed chunk size is an error in both (the control
    call names the URL), not a silently cut body."""

    async def h(head, body, w):
        w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n")
        w.write(b"zz\r\nxx\r\n" if b"/bad" in head else b"4;x=1\r\ndefg\r\n0\r\n\r\n")
        await w.drain()
        return "close"

    async with Srv(h) as srv, HttpClient() as c:
        assert (await c.get(srv.url + "/ok")).content == b"abcdefg"
        assert (await control_http.request("GET", srv.url + "/ok")).body == b"abcdefg"
        with pytest.raises(RemoteProtocolError, match="malformed chunk size"):
            await c.get(srv.url + "/bad")
        with pytest.raises(control_http.HttpError, match=r"/bad: malformed chunk size"):
            await control_http.request("GET", srv.url + "/bad")
