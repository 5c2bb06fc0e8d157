"""The simulated engines' response formats and per-request state: :class:`Req`, request ids,
token text, SSE chunks (:meth:`Formats.token_frames`, :meth:`Formats.end_frames`) and whole
responses (:meth:`Formats.respond`), in each engine's exact shape.

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
from dataclasses import dataclass
from typing import Any, Sequence

from tunedeck.sim import perf
from tunedeck.sim.httpd import Conn, frame
from tunedeck.sim.prefix import block_hashes, repetition

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
    conn: Conn | None
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
        self.conn = None


@dataclass(eq=False)
class Formats:
    """The engine's response formats: request ids, token text, SSE chunks and whole responses."""

    engine: str
    seed: int
    #: the model name the API answers with
    served: str
    #: speculative decoding (None: off)
    spec: perf.SpecConfig | None = None
    #: the prefix cache's block (None without a cache)
    block: int | None = None

    def __post_init__(self) -> None:
        self.req_counter = 0
        self.id_base = int.from_bytes(os.urandom(16), "big")  # ids differ between runs, like uuid4's
        rng = random.Random(self.seed)
        self.word_table = [rng.randrange(len(WORDS)) for _ in range(WORD_TABLE_SIZE)]
        self.word_json = [WORDS_JSON[i] for i in self.word_table]
        model = json.dumps(self.served).encode("utf-8").replace(b"%", b"%%")  # the templates are %-formatted
        head = b'data: {"id":"%b","object":"%b","created":%d,"model":' + model + b',"choices":[{"index":0,'
        if self.engine == "vllm":
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
        if self.engine == "vllm":
            r.rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + hexid
        else:
            r.rid = hexid
        r.kind = kind
        r.stream = stream
        r.prompt_tokens = prompt_tokens
        r.max_tokens = max_tokens
        r.eos_at = 1 << 60 if ignore_eos else self._pseudo_eos(n)
        r.hashes = block_hashes(ids, self.block) if ids is not None and self.block is not None else ()
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
        if self.engine == "sglang":
            u["prompt_tokens_details"] = None
            u["reasoning_tokens"] = 0
        return u

    def _head(self, r: Req, obj: str) -> dict[str, Any]:
        """The fields every OpenAI-style response object of ``r`` opens with (``obj``: its ``object``)."""
        return {"id": r.rid, "object": obj, "created": r.created, "model": self.served}

    def _chunk_head(self, r: Req) -> dict[str, Any]:
        return self._head(r, "chat.completion.chunk" if r.kind == "chat" else "text_completion")

    def _chunk_obj(self, r: Req, text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
        obj = self._chunk_head(r)
        if r.kind == "chat":
            if self.engine == "vllm":
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
            if self.engine == "vllm":
                ch["stop_reason"] = None
            else:
                ch["matched_stop"] = None
        obj["choices"] = [ch]
        if self.engine == "sglang" or (r.kind != "chat"):
            obj["usage"] = None
        if r.continuous_usage:
            obj["usage"] = self.usage(r)
        return obj

    def token_frames(self, r: Req, pos: int, n: int, first: bool) -> bytes:
        """The chunk carrying ``r``'s tokens ``pos .. pos+n`` (``r.out`` and ``r.finish`` already updated)."""
        last_with_finish = r.finish is not None and (self.engine == "vllm" or r.kind != "chat")
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
        if r.kind == "chat" and self.engine == "sglang":
            parts.append(sse(self._chunk_obj(r, None, r.finish)))
        if r.kind in ("chat", "completion") and r.include_usage:
            parts.append(sse({**self._chunk_head(r), "choices": [], "usage": self.usage(r)}))
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
            if self.engine == "vllm":
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
                    **self._head(r, "chat.completion"),
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
                    **self._head(r, "chat.completion"),
                    "choices": [
                        {"index": 0, "message": msg, "logprobs": None, "finish_reason": r.finish, "matched_stop": None}
                    ],
                    "usage": usage,
                }
        elif r.kind == "completion":
            ch: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": r.finish}
            if self.engine == "vllm":
                ch.update({"stop_reason": None, "token_ids": None, "prompt_logprobs": None, "prompt_token_ids": None})
                obj = {
                    **self._head(r, "text_completion"),
                    "choices": [ch],
                    "service_tier": None,
                    "system_fingerprint": None,
                    "usage": {**usage, "prompt_tokens_details": None},
                    "kv_transfer_params": None,
                }
            else:
                ch["matched_stop"] = None
                obj = {
                    **self._head(r, "text_completion"),
                    "choices": [ch],
                    "usage": usage,
                }
        else:
            obj = {"text": text, "output_ids": [], "meta_info": self.meta(r)}
        r.conn.send_json(200, obj)
