"""One streaming benchmark request: what is sent, what is recorded.

Per-request records (:func:`stream_request`) follow benchmark-metrics.md §1
and §5; a request never raises (except ``CancelledError``, after its partial
record was handed to ``on_partial``). The transport is :mod:`tunedeck.bench.http`
(every read timestamped on arrival), the stream parser :mod:`tunedeck.bench.sse`.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from tunedeck.bench.http import DEFAULT_READ_TIMEOUT, HttpClient, Request, Written
from tunedeck.bench.httpcore import HTTPError, RemoteProtocolError
from tunedeck.bench.httpresponse import Response
from tunedeck.bench.records import SampleRecord
from tunedeck.bench.sse import SSEParser

__all__ = [
    "DEFAULT_READ_TIMEOUT",
    "ERROR_BODY_LIMIT",
    "EndpointConfig",
    "History",
    "Live",
    "RequestSpec",
    "make_client",
    "new_sample",
    "prepare",
    "prompt_text",
    "quiet_gc",
    "stream_request",
]

_pc = time.perf_counter

ERROR_BODY_LIMIT = 2048


class quiet_gc:
    """Tune Python's cyclic GC for a timed phase; restores the settings on exit.

    Everything alive before the phase is frozen (never scanned again) and the
    young-generation threshold is raised, so collections stay rare and short:
    at C=256 x 10 ms this cut the client's p99 timestamp lag from ~6 ms to
    ~2 ms (benchmarks/client_capacity.py). Reference cycles are still
    collected, only less often.
    """

    def __init__(self, threshold0: int = 100_000) -> None:
        self.threshold0 = threshold0
        self._old: Optional[Tuple[int, int, int]] = None

    def __enter__(self) -> "quiet_gc":
        import gc

        self._old = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(self.threshold0, 50, 100)
        return self

    def __exit__(self, *exc: object) -> None:
        import gc

        if self._old is not None:
            gc.set_threshold(*self._old)
            gc.unfreeze()
            self._old = None


# ====================================================================== requests


def make_client(
    *, read_timeout: Optional[float] = DEFAULT_READ_TIMEOUT, headers: Optional[Dict[str, str]] = None
) -> HttpClient:
    """An :class:`HttpClient` sized for benchmarks (no pool limit, long read timeout)."""
    c = HttpClient(read_timeout=read_timeout, connect_timeout=10.0, write_timeout=30.0, headers=headers)
    c.sends_per_tick = SENDS_PER_TICK
    return c


#: requests that start writing per event-loop iteration in a benchmark (see HttpClient.send_turn),
#: and scheduled requests written per check of the gate (tunedeck.bench.dispatch.EagerDispatch)
SENDS_PER_TICK = 4


@dataclass
class RequestSpec:
    """One benchmark request."""

    #: text, or token ids (``/v1/completions`` accepts ``prompt: [ids]`` in vLLM and SGLang)
    prompt: Union[str, List[int]]
    #: prompt length as sent (exact for token ids); replaced by usage.prompt_tokens in the record
    prompt_len: int
    output_len: int
    index: int = 0
    #: True when ``prompt_len`` is an exact token count (token ids, or text counted by the server)
    exact: bool = False
    #: scheduled send time in seconds after the level's start (trace replay); None: by the load shape
    at_s: Optional[float] = None
    #: conversation id; None: a single-turn request
    session: Optional[int] = None
    #: turn number within the session (turns are sent in this order)
    turn: int = 0
    #: seconds to wait after the previous turn's answer before this turn is sent
    think_s: float = 0.0


#: a conversation's earlier turns: (user prompt, assistant answer as received)
History = Sequence[Tuple[str, str]]


def prompt_text(prompt: Union[str, List[int]]) -> str:
    """A prompt as text (token ids joined by spaces, as the chat endpoint gets them)."""
    return prompt if isinstance(prompt, str) else " ".join(map(str, prompt))


@dataclass
class EndpointConfig:
    """What is sent with every request."""

    base_url: str
    model: str
    endpoint: str = "completions"  # or "chat"
    ignore_eos: bool = True
    temperature: float = 0.0
    extra_body: Dict[str, Any] = field(default_factory=dict)
    request_deadline: Optional[float] = None

    @property
    def url(self) -> str:
        base = self.base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        path = "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"
        return base + path

    def body(self, spec: RequestSpec, history: Optional[History] = None) -> bytes:
        """The JSON body; ``history`` (a conversation's earlier turns) goes before this turn's prompt:
        as user/assistant messages for chat, as the concatenated text for completions."""
        payload: Dict[str, Any] = {
            "model": self.model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": self.temperature,
        }
        if self.endpoint == "chat":
            messages: List[Dict[str, str]] = []
            for user, answer in history or ():
                messages.append({"role": "user", "content": user})
                messages.append({"role": "assistant", "content": answer})
            messages.append({"role": "user", "content": prompt_text(spec.prompt)})
            payload["messages"] = messages
            payload["max_completion_tokens"] = spec.output_len
        else:
            if history:
                payload["prompt"] = "".join(u + a for u, a in history) + prompt_text(spec.prompt)
            else:
                payload["prompt"] = spec.prompt
            payload["max_tokens"] = spec.output_len
        if self.ignore_eos:
            payload["ignore_eos"] = True
        payload.update(self.extra_body)
        return json.dumps(payload, separators=(",", ":")).encode()


class Live:
    """Running counters shared by the request tasks of one process (for progress lines)."""

    __slots__ = ("bins", "in_flight", "t0")

    def __init__(self, t0: Optional[float] = None) -> None:
        self.t0 = _pc() if t0 is None else t0
        self.bins: Dict[int, int] = {}
        self.in_flight = 0

    def add(self, t: float, n: int) -> None:
        k = int(t - self.t0)
        self.bins[k] = self.bins.get(k, 0) + n


def new_sample(spec: RequestSpec) -> SampleRecord:
    return {
        "index": spec.index,
        "success": False,
        "error_type": "",
        "error": "",
        "ttft": 0.0,
        "itl": [],
        "latency": 0.0,
        "prompt_len": spec.prompt_len,
        "prompt_len_sent": spec.prompt_len,
        "prompt_len_exact": spec.exact,
        "output_tokens": 0,
        "tokens_per_event": 0.0,
        "usage_present": False,
        "start_time": 0.0,
        "wall_start": 0.0,
        "client_queue_time": 0.0,
        "send_time": 0.0,
        "elapsed": 0.0,
        "bad_lines": 0,
        "finish_reason": None,
        "session": spec.session,
        "turn": spec.turn if spec.session is not None else None,
        "scheduled_at": None,
        "sent_at": None,
        "dispatch_lag": None,
    }


_HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}


def prepare(client: HttpClient, ep: EndpointConfig, spec: RequestSpec, history: Optional[History] = None) -> Request:
    """Serialize the request ahead of time (so building costs nothing during the timed phase)."""
    return client.build("POST", ep.url, ep.body(spec, history), _HEADERS)


class _Deadline:
    """Cancels the running task after ``seconds``; tells a deadline apart from an outside cancel."""

    __slots__ = ("fired", "handle", "task")

    def __init__(self, seconds: Optional[float]) -> None:
        self.fired = False
        self.handle: Optional[asyncio.TimerHandle] = None
        self.task: "Optional[asyncio.Task[None]]" = None
        if seconds is not None:
            self.task = asyncio.current_task()
            self.handle = asyncio.get_running_loop().call_later(seconds, self._fire)

    def _fire(self) -> None:
        self.fired = True
        if self.task is not None:
            self.task.cancel()

    def owns_cancel(self) -> bool:
        """The CancelledError being handled came from this deadline only (not from outside too)."""
        if not self.fired:
            return False
        t = self.task
        cancelling = getattr(t, "cancelling", None)
        if cancelling is not None and cancelling() > 1:
            return False
        uncancel = getattr(t, "uncancel", None)
        if uncancel is not None:
            uncancel()
        return True

    def clear(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


async def stream_request(
    client: HttpClient,
    ep: EndpointConfig,
    spec: RequestSpec,
    *,
    request: Optional[Request] = None,
    queued_at: Optional[float] = None,
    live: Optional[Live] = None,
    keep_events: bool = False,
    on_partial: Optional[Callable[[SampleRecord], None]] = None,
    level_start: Optional[float] = None,
    dispatched_at: Optional[float] = None,
    keep_text: bool = False,
    written: Optional[Written] = None,
) -> SampleRecord:
    """Send one streaming request and return its record. Never raises except on cancel.

    ``request``: prebuilt by :func:`prepare` (else built here). ``queued_at``
    is when the request became due (the slot wait counts as
    ``client_queue_time``). With ``keep_events`` the record also holds
    ``_events``: ``[(perf_counter, SSE block bytes), ...]`` for precision checks.
    ``on_partial`` receives the partial record when the request is cancelled.
    ``level_start`` (the level's t0) makes the record say when the request was
    due (``scheduled_at``) and sent (``sent_at``: right before its bytes were handed to
    the socket), in seconds after it;
    ``dispatched_at``: when the dispatcher got to it (``dispatch_lag`` =
    dispatched_at - queued_at plus the time from its turn to send until it was written: the
    client's own lateness, slot waits excluded; a request never written has none).
    With ``keep_text`` the record holds ``_answer``: the text received.
    ``written``: the request was already written (:meth:`HttpClient.write_now`, by the
    dispatcher the moment it fell due); its record starts then.
    """
    s = new_sample(spec)
    sse = SSEParser(ep.endpoint == "chat", keep_events, keep_text)
    status = 0
    resp: Optional[Response] = None
    req = request if request is not None else prepare(client, ep, spec)
    if written is None:
        turn = _pc()
        await client.send_turn()  # a burst of sends yields to the reads between its parts
        st = _pc()
    else:
        turn = st = written.sent
    if live is not None:
        live.in_flight += 1
    s["start_time"] = st
    s["wall_start"] = time.time() - (_pc() - st)
    if queued_at is not None:
        s["client_queue_time"] = max(0.0, st - queued_at)
        if level_start is not None:
            s["scheduled_at"] = queued_at - level_start

    def sent(at: float) -> None:
        # the request's bytes started out at ``at``: the lateness runs until then (a connect, a
        # retry on a fresh connection included), never only until the dispatcher decided
        if level_start is not None:
            s["sent_at"] = at - level_start
        if queued_at is not None and dispatched_at is not None:
            s["dispatch_lag"] = max(0.0, dispatched_at - queued_at) + (at - turn)

    deadline = _Deadline(ep.request_deadline)
    try:
        try:
            if written is None:
                written = await client.write(req)
            sent(written.sent)
            resp = await client.response(req, written)
            if resp.sent != written.sent:
                sent(resp.sent)
            status = resp.status
            s["send_time"] = resp.written - st
            if status != 200:
                raw = b""
                try:
                    raw = await resp.aread(ERROR_BODY_LIMIT)
                except HTTPError:
                    pass  # the status line is the error; a body cut short adds nothing
                s["error_type"] = "HTTPStatus"
                s["error"] = f"HTTP {status} {resp.reason}: " + raw[:ERROR_BODY_LIMIT].decode("utf-8", "replace")
            else:
                feed = sse.feed
                times = sse.times
                nb = resp.next_batch
                while True:
                    batch = await nb()
                    if batch is None:
                        break
                    n0 = len(times)
                    for t, data in batch:
                        feed(t, data)
                    if live is not None and len(times) > n0:
                        live.add(batch[-1][0], len(times) - n0)
                sse.end(times[-1] if times else _pc())
        except RemoteProtocolError as e:
            if status == 200:
                s["error_type"] = "IncompleteStream"
                s["error"] = f"RemoteProtocolError: {e}"[:ERROR_BODY_LIMIT]
            else:
                s["error_type"] = type(e).__name__
                s["error"] = str(e)[:ERROR_BODY_LIMIT]
        except asyncio.CancelledError:
            if deadline.owns_cancel():
                s["error_type"] = "DeadlineExceeded"
                s["error"] = f"request exceeded its {ep.request_deadline:g} s deadline"
            else:
                s["error_type"] = "Cancelled"
                s["error"] = "cancelled before the response ended"
                _finish(s, sse, st, status)
                if on_partial is not None:
                    on_partial(s)
                raise
        except Exception as e:  # noqa: BLE001 - a request never raises; the failure is its record
            s["error_type"] = type(e).__name__
            s["error"] = (str(e) or type(e).__name__)[:ERROR_BODY_LIMIT]
        finally:
            deadline.clear()
            if resp is not None:
                await resp.aclose()
        _finish(s, sse, st, status)
    finally:
        if live is not None:
            live.in_flight -= 1
    return s


def _finish(s: SampleRecord, sse: SSEParser, st: float, status: int) -> None:
    s["elapsed"] = _pc() - st
    times = sse.times
    if sse.events is not None:
        s["_events"] = sse.events
    if sse.text is not None:
        s["_answer"] = "".join(sse.text)
    s["bad_lines"] = sse.bad
    s["finish_reason"] = sse.finish
    usage = sse.usage
    if isinstance(usage, dict):
        s["usage_present"] = True
        ct = usage.get("completion_tokens")
        if isinstance(ct, int):
            s["output_tokens"] = ct
        pt = usage.get("prompt_tokens")
        if isinstance(pt, int):
            s["prompt_len"] = pt
    if times:
        s["ttft"] = times[0] - st
        s["itl"] = [b - a for a, b in zip(times, times[1:])]
        s["latency"] = times[-1] - st
        if not s["usage_present"]:
            s["output_tokens"] = len(times)  # no tokenizer: one token per output event
        s["tokens_per_event"] = s["output_tokens"] / len(times)
    if s["error_type"] or status != 200:
        return
    if sse.error is not None:
        s["error_type"] = "StreamError"
        s["error"] = str(sse.error)[:ERROR_BODY_LIMIT]
    elif sse.bad:
        s["error_type"] = "MalformedSSE"
        s["error"] = f"{sse.bad} malformed SSE line(s)"
    elif not times:
        s["error_type"] = "EmptyStream"
        s["error"] = "Never received a valid chunk to calculate TTFT."
    elif not sse.done and not sse.finish:
        s["error_type"] = "IncompleteStream"
        s["error"] = "stream ended without [DONE] or a finish_reason"
    else:
        s["success"] = True
