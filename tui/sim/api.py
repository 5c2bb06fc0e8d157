"""The simulated engines' HTTP API: routes, request checks, per-request state, SSE and response formats.

:class:`Api` is the part of :class:`tui.sim.engine.Sim` that speaks HTTP: each route
answers at once, or hands a generation request to the engine (fixed timing or the
continuous-batching scheduler), which writes its tokens with :meth:`Api.token_frames`
and ends the response with :meth:`Api.end_frames` or :meth:`Api.respond`.

The hot path is one token chunk per request per step, so a request carries its chunk
as two pre-encoded halves (``pre`` and ``suf``) around the token's JSON string, and the
token text comes from a seeded table of pre-encoded words (no per-request RNG).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
import uuid
from typing import Any, Callable, Sequence

from tui.engines import SGLANG_VERSION, VLLM_VERSION
from tui.sim import perf
from tui.sim.httpd import REASONS, Conn, Request, frame
from tui.sim.prefix import PrefixCache, block_hashes, chat_ids, repetition, text_ids

WORDS = (
    " the",
    " model",
    " server",
    " token",
    " is",
    " a",
    " fast",
    " and",
    " of",
    " to",
    " in",
    " GPU",
    " batch",
    " cache",
    " that",
    " with",
    " on",
    " for",
    " it",
    " as",
    " memory",
    " we",
    " can",
    " run",
    " more",
    " data",
    " time",
    " each",
    " step",
    " high",
    " low",
    " will",
    " not",
    " this",
    " by",
    " at",
    ".",
    ",",
    " per",
    " value",
)
#: each word as a JSON string, UTF-8
WORDS_JSON = tuple(json.dumps(w, ensure_ascii=False).encode("utf-8") for w in WORDS)
#: the token text of every request is this many seeded word picks, read from a per-request offset
WORD_TABLE_SIZE = 4096
_ID_MIX = 0x9E3779B97F4A7C15F39CC0605CEDC835  # odd: counter -> id is a bijection mod 2**128
_ID_MASK = (1 << 128) - 1
DONE = b"data: [DONE]\n\n"
_INT_TYPES = frozenset((int, bool))  # what JSON decodes a token id list into (bool: isinstance(True, int))


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def sse(obj: Any) -> bytes:
    """One SSE event carrying ``obj`` as compact JSON."""
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n\n"


class Req:
    """One generation request, from arrival (when the server read it) to its last chunk."""

    __slots__ = (
        "aborted",
        "admitted",
        "alpha",
        "arrival",
        "arrival_wall",
        "cached",
        "conn",
        "continuous_usage",
        "counts",
        "created",
        "done",
        "due",
        "eos_at",
        "finish",
        "first",
        "fixlen",
        "hashes",
        "include_usage",
        "internal",
        "kind",
        "last",
        "max_tokens",
        "out",
        "pre",
        "prompt_tokens",
        "rid",
        "stream",
        "suf",
        "text",
        "times",
        "todo",
        "verify_ct",
        "wpos",
    )

    rid: str
    kind: str
    stream: bool
    prompt_tokens: int
    max_tokens: int
    eos_at: int
    include_usage: bool
    continuous_usage: bool
    conn: Any
    created: int
    arrival: float
    arrival_wall: float
    wpos: int
    pre: bytes
    suf: bytes
    fixlen: int
    #: chained hashes of the prompt's full blocks (empty without a prefix cache)
    hashes: Sequence[int]
    #: per-draft-token acceptance under speculative decoding, from the prompt's content
    alpha: float

    def __init__(self) -> None:
        self.out = 0
        self.cached = 0  # prompt tokens the prefix cache had when the request was admitted
        self.todo = -1  # prompt tokens still to prefill; -1 until admitted
        self.verify_ct = 0  # speculative verify steps (SGLang's meta_info ``spec_verify_ct``)
        self.text: list[str] | None = None  # kept only where a response repeats it (non-stream, /generate)
        self.finish: str | None = None
        self.admitted = 0.0
        self.first = 0.0
        self.last = 0.0
        self.times: list[float] = []
        self.counts: list[int] = []
        self.internal = False
        self.aborted = False
        self.due = 0.0  # fixed timing: when the next token is due
        self.done: asyncio.Future[None] | None = None  # set for requests the engine itself awaits (warmup)
        self.conn: Conn | None = None


class Api:
    """Routes and formats; mixed into the engine, whose state (``e``, ``a``, ``metrics``, queues) it reads."""

    # provided by the engine
    e: str
    a: Any
    seed: int
    speed: float
    served: str
    model: str
    context_len: int
    phase: str
    running: list[Req]
    waiting: Any
    metrics: Any
    log: Any
    step_waiters: list[Callable[[], None]]
    spec: perf.SpecConfig | None = None
    cache: PrefixCache | None = None
    chunked: Req | None = None

    def init_api(self) -> None:
        """Routes, id source, word table and chunk templates (once, at start)."""
        self.req_counter = 0
        self.id_base = int.from_bytes(os.urandom(16), "big")  # ids differ between runs, like uuid4's
        rng = random.Random(self.seed)
        self.word_table = [rng.randrange(len(WORDS)) for _ in range(WORD_TABLE_SIZE)]
        self.word_json = [WORDS_JSON[i] for i in self.word_table]
        model = json.dumps(self.served).encode("utf-8").replace(b"%", b"%%")  # the templates are %-formatted
        head = b'data: {"id":"%b","object":"%b","created":%d,"model":' + model + b',"choices":[{"index":0,'
        if self.e == "vllm":
            chat = (head + b'"delta":{"content":', b'},"logprobs":null,"finish_reason":null}]}\n\n')
            completion = (
                head + b'"text":',
                b',"logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}\n\n',
            )
        else:
            chat = (
                head + b'"delta":{"role":null,"content":',
                b',"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,'
                b'"matched_stop":null}],"usage":null}\n\n',
            )
            completion = (
                head + b'"text":',
                b',"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n',
            )
        self.templates = {"chat": chat, "completion": completion}
        self.routes: dict[str, Callable[[Request, Conn], None]] = {
            "/health": self.r_health,
            "/v1/models": self.r_models,
            "/v1/completions": self.r_completions,
            "/v1/chat/completions": self.r_chat,
            "/metrics": self.r_metrics,
        }
        if self.e == "sglang":
            self.routes.update(
                {
                    "/health_generate": self.r_health,
                    "/ready": self.r_health,
                    "/model_info": self.r_model_info,
                    "/get_model_info": self.r_model_info,
                    "/server_info": self.r_server_info,
                    "/get_server_info": self.r_server_info,
                    "/flush_cache": self.r_flush,
                    "/generate": self.r_generate,
                    "/freeze_gc": self.r_ok,
                }
            )
        else:
            self.routes.update(
                {"/ping": self.r_health, "/version": self.r_version, "/load": self.r_load, "/tokenize": self.r_tokenize}
            )
            if os.environ.get("VLLM_SERVER_DEV_MODE") == "1":
                self.routes["/reset_prefix_cache"] = self.r_reset_prefix_cache

    # ------------------------------------------------------------------ engine hooks
    def submit(self, r: Req) -> None:  # the engine's
        raise NotImplementedError

    def update_gauges(self) -> None:  # the engine's
        raise NotImplementedError

    # ------------------------------------------------------------------ requests
    def new_req(
        self,
        kind: str,
        *,
        stream: bool,
        prompt_tokens: int,
        max_tokens: int,
        ignore_eos: bool,
        include_usage: bool = False,
        continuous_usage: bool = False,
        conn: Conn | None = None,
        arrival: float | None = None,
        arrival_wall: float | None = None,
        ids: Sequence[int] | None = None,
    ) -> Req:
        """A request read at ``arrival`` (``time.monotonic()``) / ``arrival_wall``; now when not given.

        ``ids``, the prompt's token ids, give its prefix-cache blocks and speculative acceptance;
        without them (the warmup) the prompt shares nothing and accepts at the method's rate.
        """
        r = Req()
        self.req_counter += 1
        n = self.req_counter
        hexid = "%032x" % (((n * _ID_MIX) ^ self.id_base) & _ID_MASK)
        if self.e == "vllm":
            r.rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + hexid
        else:
            r.rid = hexid
        r.kind = kind
        r.stream = stream
        r.prompt_tokens = prompt_tokens
        r.max_tokens = max_tokens
        r.eos_at = 1 << 60 if ignore_eos else self._pseudo_eos(n)
        r.hashes = block_hashes(ids, self.cache.block) if ids is not None and self.cache is not None else ()
        r.alpha = 0.0
        if self.spec is not None:
            r.alpha = perf.content_alpha(self.spec.alpha, *repetition(ids)) if ids is not None else self.spec.alpha
        r.wpos = (n * 2654435761) % WORD_TABLE_SIZE
        r.include_usage = include_usage
        r.continuous_usage = continuous_usage
        r.conn = conn
        r.arrival = time.monotonic() if arrival is None else arrival
        r.arrival_wall = time.time() if arrival_wall is None else arrival_wall
        r.created = int(r.arrival_wall)
        if not stream or kind == "generate":
            r.text = []
        tpl = self.templates.get(kind)
        if tpl is not None:
            obj = b"chat.completion.chunk" if kind == "chat" else b"text_completion"
            r.pre = tpl[0] % (r.rid.encode("ascii"), obj, r.created)
            r.suf = tpl[1]
            r.fixlen = len(r.pre) + len(r.suf)
        return r

    def _pseudo_eos(self, n: int) -> int:
        """Request ``n``'s pseudo-EOS: log-normal around 200 tokens, seeded by (seed, n) (Box-Muller on splitmix64)."""
        u1 = (_splitmix64(self.seed * 0x100000001B3 + 2 * n) >> 11) * 2.0**-53
        u2 = (_splitmix64(self.seed * 0x100000001B3 + 2 * n + 1) >> 11) * 2.0**-53
        z = math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)
        return max(1, int(math.exp(math.log(200) + 0.8 * z)))

    def words(self, pos: int, n: int) -> str:
        table = self.word_table
        return "".join(WORDS[table[(pos + i) % WORD_TABLE_SIZE]] for i in range(n))

    # ------------------------------------------------------------------ SSE formats
    def usage(self, r: Req) -> dict[str, Any]:
        u: dict[str, Any] = {
            "prompt_tokens": r.prompt_tokens,
            "total_tokens": r.prompt_tokens + r.out,
            "completion_tokens": r.out,
        }
        if self.e == "sglang":
            u["prompt_tokens_details"] = None
            u["reasoning_tokens"] = 0
        return u

    def _chunk_obj(self, r: Req, text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": r.rid,
            "object": "chat.completion.chunk" if r.kind == "chat" else "text_completion",
            "created": r.created,
            "model": self.served,
        }
        if r.kind == "chat":
            if self.e == "vllm":
                delta: dict[str, Any] = {}
                if role:
                    delta["role"] = "assistant"
                if text is not None:
                    delta["content"] = text
                ch: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                if finish is not None:
                    ch["stop_reason"] = None
            else:
                delta = {
                    "role": "assistant" if role else None,
                    "content": text,
                    "reasoning_content": None,
                    "tool_calls": None,
                }
                ch = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}
        else:
            ch = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            if self.e == "vllm":
                ch["stop_reason"] = None
            else:
                ch["matched_stop"] = None
        obj["choices"] = [ch]
        if self.e == "sglang" or (r.kind != "chat"):
            obj["usage"] = None
        if r.continuous_usage:
            obj["usage"] = self.usage(r)
        return obj

    def token_frames(self, r: Req, pos: int, n: int, first: bool) -> bytes:
        """The chunk carrying ``r``'s tokens ``pos .. pos+n`` (``r.out`` and ``r.finish`` already updated)."""
        last_with_finish = r.finish is not None and (self.e == "vllm" or r.kind != "chat")
        if n == 1 and not first and not last_with_finish and not r.continuous_usage and r.kind != "generate":
            w = self.word_json[pos % WORD_TABLE_SIZE]
            return b"%x\r\n%b%b%b\r\n" % (r.fixlen + len(w), r.pre, w, r.suf)
        if r.kind == "generate":  # the text so far, in every chunk
            obj = {"text": "".join(r.text or ()), "output_ids": [], "meta_info": self.meta(r)}
            return frame(sse(obj))
        text = self.words(pos, n)
        parts: list[bytes] = []
        if first and r.kind == "chat":
            parts.append(sse(self._chunk_obj(r, "", None, role=True)))
        if last_with_finish or r.continuous_usage:
            parts.append(sse(self._chunk_obj(r, text, r.finish if last_with_finish else None)))
        else:
            parts.append(r.pre + json.dumps(text, ensure_ascii=False).encode("utf-8") + r.suf)
        return frame(b"".join(parts))

    def end_frames(self, r: Req) -> bytes:
        """What follows the last token of a stream: finish (SGLang chat), usage, ``[DONE]``, as one chunk."""
        parts: list[bytes] = []
        if r.kind == "chat" and self.e == "sglang":
            parts.append(sse(self._chunk_obj(r, None, r.finish)))
        if r.kind in ("chat", "completion") and r.include_usage:
            obj: dict[str, Any] = {
                "id": r.rid,
                "object": "chat.completion.chunk" if r.kind == "chat" else "text_completion",
                "created": r.created,
                "model": self.served,
                "choices": [],
                "usage": self.usage(r),
            }
            parts.append(sse(obj))
        parts.append(DONE)
        return frame(b"".join(parts))

    def meta(self, r: Req) -> dict[str, Any]:
        fr: Any = None
        if r.finish == "length":
            fr = {"type": "length", "length": r.out}
        elif r.finish == "stop":
            fr = {"type": "stop", "matched": 2}
        return {
            "id": r.rid,
            "finish_reason": fr,
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.out,
            "cached_tokens": r.cached,
            "e2e_latency": round(r.last - r.arrival, 6) if r.last else 0.0,
            **self.spec_meta(r),
        }

    def spec_meta(self, r: Req) -> dict[str, Any]:
        """SGLang's per-request speculative figures in ``meta_info`` (``srt/managers/tokenizer_manager.py``,
        ``_calculate_spec_decoding_metrics``): length = completion tokens / verify steps, rate =
        accepted / (verify steps × (draft tokens − 1)); none without speculative decoding. The first
        token comes from the prefill and each verify step adds one of the target's own, so the rest
        of the answer is the accepted drafts (as emitted: an answer's end cuts its last step)."""
        spec = self.spec
        if spec is None:
            return {}
        proposed = r.verify_ct * (spec.draft_tokens - 1)
        accepted = max(0, r.out - 1 - r.verify_ct)
        return {
            "spec_verify_ct": r.verify_ct,
            "spec_accept_length": r.out / r.verify_ct if r.verify_ct else 0,
            "spec_accept_rate": accepted / proposed if proposed else 0.0,
            "spec_num_correct_drafts": accepted,
            "spec_num_proposed_drafts": proposed,
        }

    def respond(self, r: Req) -> None:
        """The whole (non-stream) response of a finished request."""
        if r.conn is None:
            return
        text = "".join(r.text or ())
        usage = self.usage(r)
        if r.kind == "chat":
            if self.e == "vllm":
                msg: dict[str, Any] = {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "tool_calls": [],
                    "reasoning": None,
                }
                obj = {
                    "id": r.rid,
                    "object": "chat.completion",
                    "created": r.created,
                    "model": self.served,
                    "choices": [
                        {
                            "index": 0,
                            "message": msg,
                            "logprobs": None,
                            "finish_reason": r.finish,
                            "stop_reason": None,
                            "token_ids": None,
                        }
                    ],
                    "service_tier": None,
                    "system_fingerprint": None,
                    "usage": {**usage, "prompt_tokens_details": None},
                    "prompt_logprobs": None,
                    "prompt_token_ids": None,
                    "kv_transfer_params": None,
                }
            else:
                msg = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}
                obj = {
                    "id": r.rid,
                    "object": "chat.completion",
                    "created": r.created,
                    "model": self.served,
                    "choices": [
                        {"index": 0, "message": msg, "logprobs": None, "finish_reason": r.finish, "matched_stop": None}
                    ],
                    "usage": usage,
                }
        elif r.kind == "completion":
            ch: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": r.finish}
            if self.e == "vllm":
                ch.update({"stop_reason": None, "token_ids": None, "prompt_logprobs": None, "prompt_token_ids": None})
                obj = {
                    "id": r.rid,
                    "object": "text_completion",
                    "created": r.created,
                    "model": self.served,
                    "choices": [ch],
                    "service_tier": None,
                    "system_fingerprint": None,
                    "usage": {**usage, "prompt_tokens_details": None},
                    "kv_transfer_params": None,
                }
            else:
                ch["matched_stop"] = None
                obj = {
                    "id": r.rid,
                    "object": "text_completion",
                    "created": r.created,
                    "model": self.served,
                    "choices": [ch],
                    "usage": usage,
                }
        else:
            obj = {"text": text, "output_ids": [], "meta_info": self.meta(r)}
        r.conn.send_json(200, obj)

    # ------------------------------------------------------------------ HTTP
    def access_log(self, req: Request, status: int) -> None:
        if self.e == "vllm" and self.a.disable_uvicorn_access_log:
            return
        self.log.uvicorn(
            f'{req.peer} - "{req.method} {req.target} {req.version}" {status} {REASONS.get(status, "")}'.rstrip()
        )

    def _error(
        self, conn: Conn, status: int, message: str, etype: str = "BadRequestError", param: str | None = None
    ) -> None:
        if self.e == "vllm":
            conn.send_json(status, {"error": {"message": message, "type": etype, "param": param, "code": status}})
        else:
            conn.send_json(
                status, {"object": "error", "message": message, "type": etype, "param": param, "code": status}
            )

    def handle(self, req: Request, conn: Conn) -> None:
        p = req.path
        m = req.method
        fn = self.routes.get(p)
        if fn is None:
            conn.send_json(404, {"detail": "Not Found"})
            return
        post_only = (
            "/v1/completions",
            "/v1/chat/completions",
            "/generate",
            "/freeze_gc",
            "/tokenize",
            "/reset_prefix_cache",
        )
        if (p in post_only and m != "POST") or (
            p not in post_only and m not in ("GET", "HEAD") and p not in ("/ping", "/flush_cache")
        ):
            conn.send_json(405, {"detail": "Method Not Allowed"})
            return
        fn(req, conn)

    def _auth_ok(self, req: Request, conn: Conn) -> bool:
        key = self.a.api_key
        if not key:
            return True
        if req.headers.get("authorization", "") == f"Bearer {key}":
            return True
        conn.send_json(401, {"error": "Unauthorized"})
        return False

    def r_ok(self, req: Request, conn: Conn) -> None:
        conn.send(200, b"")

    def r_health(self, req: Request, conn: Conn) -> None:
        if self.phase not in ("ready",):
            conn.send(503, b"")
            return
        if self.e == "sglang" and (self.running or self.waiting):
            # SGLang answers once the scheduler has run a step (503 if none within 20 s)
            def answer(ok: bool) -> None:
                if not conn.started:
                    timeout.cancel()
                    conn.send(200 if ok else 503, b"")

            timeout = asyncio.get_running_loop().call_later(20.0 / self.speed, answer, False)
            self.step_waiters.append(lambda: answer(True))
            return
        conn.send(200, b"")

    def r_version(self, req: Request, conn: Conn) -> None:
        conn.send_json(200, {"version": VLLM_VERSION})

    def r_load(self, req: Request, conn: Conn) -> None:
        conn.send_json(200, {"server_load": len(self.running) + len(self.waiting)})

    def r_models(self, req: Request, conn: Conn) -> None:
        if not self._auth_ok(req, conn):
            return
        card: dict[str, Any] = {
            "id": self.served,
            "object": "model",
            "created": int(time.time()),
            "owned_by": self.e,
            "root": self.model,
            "parent": None,
            "max_model_len": self.context_len,
        }
        if self.e == "vllm":
            card["permission"] = [
                {
                    "id": "modelperm-" + uuid.uuid5(uuid.NAMESPACE_DNS, self.served).hex,
                    "object": "model_permission",
                    "created": int(time.time()),
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ]
        conn.send_json(200, {"object": "list", "data": [card]})

    def r_metrics(self, req: Request, conn: Conn) -> None:
        if self.e == "sglang" and not self.a.enable_metrics:
            conn.send_json(404, {"detail": "Not Found"})
            return
        self.update_gauges()
        conn.send(200, self.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")

    def r_model_info(self, req: Request, conn: Conn) -> None:
        facts = self.facts  # type: ignore[attr-defined]
        conn.send_json(
            200,
            {
                "model_path": self.model,
                "tokenizer_path": self.a.tokenizer_path or self.model,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": facts["model_type"],
                "architectures": [facts["arch"]],
                "served_model_name": self.served,
            },
        )

    def r_server_info(self, req: Request, conn: Conn) -> None:
        s: Any = self
        info = {k: v for k, v in vars(self.a).items() if not k.startswith("sim_")}
        info["served_model_name"] = self.served
        info.update(
            {
                "version": SGLANG_VERSION,
                "max_total_num_tokens": s.kv_tokens,
                "internal_states": [
                    {
                        "last_gen_throughput": round(s.last_gen_tput, 2),
                        "memory_usage": {
                            "weight": round(s.weights_gib, 2),
                            "kvcache": round(s.kv_gib, 2),
                            "token_capacity": s.kv_tokens,
                            "graph": round(s.graph_gib, 2),
                        },
                        # every decode line's steps since start, as SGLang's scheduler sums them
                        "avg_spec_accept_length": (
                            round(s.accept_total_sum / s.accept_total_n, 2) if s.spec and s.accept_total_n else None
                        ),
                    }
                ],
            }
        )
        conn.send_json(200, info)

    def r_reset_prefix_cache(self, req: Request, conn: Conn) -> None:
        """vLLM's ``POST /reset_prefix_cache`` (``VLLM_SERVER_DEV_MODE=1`` only): 200 without checking;
        the cache is emptied only when no request holds blocks, as vLLM's reset fails then."""
        if self.cache is not None and not self.running and not self.waiting:
            self.cache.clear()
        conn.send(200, b"")

    def r_flush(self, req: Request, conn: Conn) -> None:
        body = (
            b"Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
            b"requests, the operation will not be performed.)\n"
        )
        if self.running or self.waiting or self.chunked is not None:
            self.log.sg(
                f"Cache not flushed because there are pending requests. #queue-req: {len(self.waiting)}, "
                f"#running-req: {len(self.running)}"
            )
            conn.send(400, body, "text/plain; charset=utf-8")
            return
        if self.cache is not None:
            self.cache.clear()
        self.log.sg("Cache flushed successfully!")
        conn.send(200, body, "text/plain; charset=utf-8")

    # ---- generation endpoints
    def _body(self, req: Request, conn: Conn) -> dict[str, Any] | None:
        try:
            body = req.json()
        except (ValueError, UnicodeDecodeError) as e:
            self._error(conn, 400, f"Invalid JSON body: {e}")
            return None
        if not isinstance(body, dict):
            self._error(conn, 400, "Request body must be a JSON object")
            return None
        return body

    def _common_checks(self, body: dict[str, Any], conn: Conn) -> bool:
        if self.phase not in ("ready", "warmup"):
            self._error(conn, 503, "The server is shutting down", "ServiceUnavailableError")
            return False
        model = body.get("model")
        if self.e == "vllm" and model is not None and model not in (self.served, self.model):
            self._error(conn, 404, f"The model `{model}` does not exist.", "NotFoundError", "model")
            return False
        n = body.get("n", 1)
        if n not in (None, 1):
            self._error(
                conn, 400, "n must be 1 in the simulator (tunedeck sim serves one choice per request)", param="n"
            )
            return False
        return True

    def _max_tokens(self, body: dict[str, Any], prompt: int, default: int | None, conn: Conn) -> int | None:
        mt = body.get("max_completion_tokens", body.get("max_tokens"))
        if mt is None:
            mt = default if default is not None else self.context_len - prompt
        if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
            self._error(conn, 400, f"max_tokens must be at least 1, got {mt}.", param="max_tokens")
            return None
        if prompt + mt > self.context_len:
            self._error(
                conn,
                400,
                f"This model's maximum context length is {self.context_len} tokens. However, you requested "
                f"{prompt + mt} tokens ({prompt} in the messages, {mt} in the completion). Please reduce the length "
                "of the messages or completion.",
            )
            return None
        return mt

    def _stream_opts(self, body: dict[str, Any]) -> tuple[bool, bool, bool]:
        stream = bool(body.get("stream", False))
        so = body.get("stream_options") or {}
        inc = bool(so.get("include_usage", False)) if isinstance(so, dict) else False
        cont = bool(so.get("continuous_usage_stats", False)) if isinstance(so, dict) else False
        if self.e == "sglang" and self.a.stream_response_default_include_usage:
            inc = True
        if self.e == "vllm" and self.a.enable_force_include_usage:
            inc = True
        return stream, inc, cont

    def _run(self, r: Req, conn: Conn) -> None:
        """Start the response (a stream's head goes out now) and hand the request to the engine."""
        if r.stream:
            conn.start_stream()
        self.submit(r)

    def r_completions(self, req: Request, conn: Conn) -> None:
        if not self._auth_ok(req, conn):
            return
        body = self._body(req, conn)
        if body is None or not self._common_checks(body, conn):
            return
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = text_ids(prompt)
        elif isinstance(prompt, list) and prompt and _INT_TYPES.issuperset(map(type, prompt)):
            ids = prompt
        else:
            self._error(
                conn, 400, "prompt must be a string or a list of token ids (one prompt per request)", param="prompt"
            )
            return
        pt = len(ids)
        mt = self._max_tokens(body, pt, 16, conn)
        if mt is None:
            return
        stream, inc, cont = self._stream_opts(body)
        r = self.new_req(
            "completion",
            stream=stream,
            prompt_tokens=pt,
            max_tokens=mt,
            ignore_eos=bool(body.get("ignore_eos", False)),
            include_usage=inc and stream,
            continuous_usage=cont and stream,
            conn=conn,
            arrival=req.arrival,
            arrival_wall=req.arrival_wall,
            ids=ids,
        )
        self._run(r, conn)

    def _chat_tokens(self, body: dict[str, Any], conn: Conn) -> list[int] | None:
        """Prompt token ids of a chat request (:func:`tui.sim.prefix.chat_ids`): 3 for the template,
        4 per message plus its content."""
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            self._error(conn, 400, "messages must be a non-empty list", param="messages")
            return None
        for msg in msgs:
            if not isinstance(msg, dict):
                self._error(conn, 400, "each message must be an object", param="messages")
                return None
        return chat_ids(msgs)

    def r_tokenize(self, req: Request, conn: Conn) -> None:
        """vLLM's ``POST /tokenize``: ``prompt`` (text or ids) or ``messages``; counted like a request."""
        body = self._body(req, conn)
        if body is None:
            return
        if "messages" in body:
            ids = self._chat_tokens(body, conn)
            if ids is None:
                return
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, str):
                ids = text_ids(prompt)
            elif isinstance(prompt, list) and all(isinstance(x, int) for x in prompt):
                ids = prompt
            else:
                self._error(conn, 400, "prompt must be a string or a list of token ids", param="prompt")
                return
        # the stand-in tokenizer's ids (tui.sim.prefix): sent back as a prompt, they are the same prompt
        conn.send_json(200, {"count": len(ids), "max_model_len": self.context_len, "tokens": ids, "token_strs": None})

    def r_chat(self, req: Request, conn: Conn) -> None:
        if not self._auth_ok(req, conn):
            return
        body = self._body(req, conn)
        if body is None or not self._common_checks(body, conn):
            return
        ids = self._chat_tokens(body, conn)
        if ids is None:
            return
        pt = len(ids)
        mt = self._max_tokens(body, pt, None, conn)
        if mt is None:
            return
        stream, inc, cont = self._stream_opts(body)
        r = self.new_req(
            "chat",
            stream=stream,
            prompt_tokens=pt,
            max_tokens=mt,
            ignore_eos=bool(body.get("ignore_eos", False)),
            include_usage=inc and stream,
            continuous_usage=cont and stream,
            conn=conn,
            arrival=req.arrival,
            arrival_wall=req.arrival_wall,
            ids=ids,
        )
        self._run(r, conn)

    def r_generate(self, req: Request, conn: Conn) -> None:
        body = self._body(req, conn)
        if body is None or not self._common_checks(body, conn):
            return
        sp = body.get("sampling_params") or {}
        ids: list[int] | None = None
        if body.get("input_ids") is not None:
            given = body["input_ids"]
            if isinstance(given, list) and given and _INT_TYPES.issuperset(map(type, given)):
                ids = given
            pt = len(given) if isinstance(given, list) else 1
        else:
            ids = text_ids(str(body.get("text", "")))
            pt = len(ids)
        mt = sp.get("max_new_tokens", 128) if isinstance(sp, dict) else 128
        if not isinstance(mt, int) or mt < 1:
            self._error(conn, 400, "max_new_tokens must be a positive integer")
            return
        r = self.new_req(
            "generate",
            stream=bool(body.get("stream", False)),
            prompt_tokens=pt,
            max_tokens=mt,
            ignore_eos=bool(sp.get("ignore_eos", False)) if isinstance(sp, dict) else False,
            conn=conn,
            arrival=req.arrival,
            arrival_wall=req.arrival_wall,
            ids=ids,
        )
        self._run(r, conn)
