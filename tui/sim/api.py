"""The simulated engines' HTTP API: routes and request checks.

Each route answers at once, or builds a request (:meth:`tunedeck.sim.formats.Formats.new_req`) and
hands it to the scheduler (``submit``: fixed timing or continuous batching), which writes its
tokens in the engine's format (:mod:`tunedeck.sim.formats`).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any, Callable

from tunedeck.engines import SGLANG_VERSION, VLLM_VERSION
from tunedeck.sim.formats import Formats, Req
from tunedeck.sim.httpd import REASONS, Conn, Request
from tunedeck.sim.prefix import chat_ids, text_ids
from tunedeck.sim.state import ServerState

_INT_TYPES = frozenset((int, bool))  # what JSON decodes a token id list into (bool: isinstance(True, int))


class Api:
    """The routes of one server: reads its state, builds requests with ``formats`` and hands them
    to ``submit``; ``update_gauges`` brings the metrics' gauges up to date before ``/metrics``."""

    def __init__(
        self,
        state: ServerState,
        formats: Formats,
        submit: Callable[[Req], None],
        update_gauges: Callable[[], None],
    ) -> None:
        self.state = state
        self.cfg = state.cfg
        self.e = state.cfg.engine
        self.a = state.cfg.args
        self.formats = formats
        self.submit = submit
        self.update_gauges = update_gauges
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

    def access_log(self, req: Request, status: int) -> None:
        if self.e == "vllm" and self.a.disable_uvicorn_access_log:
            return
        self.state.log.uvicorn(
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
        key = self.a.api_key  # SGLang: one key; vLLM: one or more, any of them lets a request in
        keys = key if isinstance(key, list) else [key] if key else []
        if not keys:
            return True
        if req.headers.get("authorization", "") in {f"Bearer {k}" for k in keys}:
            return True
        conn.send_json(401, {"error": "Unauthorized"})
        return False

    def r_ok(self, req: Request, conn: Conn) -> None:
        conn.send(200, b"")

    def r_health(self, req: Request, conn: Conn) -> None:
        if self.state.phase not in ("ready",):
            conn.send(503, b"")
            return
        if self.e == "sglang" and (self.state.running or self.state.waiting):
            # SGLang answers once the scheduler has run a step (503 if none within 20 s)
            def answer(ok: bool) -> None:
                if not conn.started:
                    timeout.cancel()
                    conn.send(200 if ok else 503, b"")

            timeout = asyncio.get_running_loop().call_later(20.0 / self.cfg.speed, answer, False)
            self.state.step_waiters.append(lambda: answer(True))
            return
        conn.send(200, b"")

    def r_version(self, req: Request, conn: Conn) -> None:
        conn.send_json(200, {"version": VLLM_VERSION})

    def r_load(self, req: Request, conn: Conn) -> None:
        conn.send_json(200, {"server_load": len(self.state.running) + len(self.state.waiting)})

    def r_models(self, req: Request, conn: Conn) -> None:
        if not self._auth_ok(req, conn):
            return
        card: dict[str, Any] = {
            "id": self.cfg.served,
            "object": "model",
            "created": int(time.time()),
            "owned_by": self.e,
            "root": self.cfg.model,
            "parent": None,
            "max_model_len": self.cfg.context_len,
        }
        if self.e == "vllm":
            card["permission"] = [
                {
                    "id": "modelperm-" + uuid.uuid5(uuid.NAMESPACE_DNS, self.cfg.served).hex,
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
        conn.send(200, self.state.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")

    def r_model_info(self, req: Request, conn: Conn) -> None:
        facts = self.cfg.facts
        conn.send_json(
            200,
            {
                "model_path": self.cfg.model,
                "tokenizer_path": self.a.tokenizer_path or self.cfg.model,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": facts["model_type"],
                "architectures": [facts["arch"]],
                "served_model_name": self.cfg.served,
            },
        )

    def r_server_info(self, req: Request, conn: Conn) -> None:
        s = self.state
        info = {k: v for k, v in vars(self.a).items() if not k.startswith("sim_")}
        info["served_model_name"] = self.cfg.served
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
                            round(s.accept_total_sum / s.accept_total_n, 2)
                            if self.cfg.spec and s.accept_total_n
                            else None
                        ),
                    }
                ],
            }
        )
        conn.send_json(200, info)

    def r_reset_prefix_cache(self, req: Request, conn: Conn) -> None:
        """vLLM's ``POST /reset_prefix_cache`` (``VLLM_SERVER_DEV_MODE=1`` only): 200 without checking;
        the cache is emptied only when no request holds blocks, as vLLM's reset fails then."""
        if self.state.cache is not None and not self.state.running and not self.state.waiting:
            self.state.cache.clear()
        conn.send(200, b"")

    def r_flush(self, req: Request, conn: Conn) -> None:
        body = (
            b"Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
            b"requests, the operation will not be performed.)\n"
        )
        if self.state.running or self.state.waiting or self.state.chunked is not None:
            self.state.log.sg(
                f"Cache not flushed because there are pending requests. #queue-req: {len(self.state.waiting)}, "
                f"#running-req: {len(self.state.running)}"
            )
            conn.send(400, body, "text/plain; charset=utf-8")
            return
        if self.state.cache is not None:
            self.state.cache.clear()
        self.state.log.sg("Cache flushed successfully!")
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
        if self.state.phase not in ("ready", "warmup"):
            self._error(conn, 503, "The server is shutting down", "ServiceUnavailableError")
            return False
        model = body.get("model")
        if self.e == "vllm" and model is not None and model not in (self.cfg.served, self.cfg.model):
            self._error(conn, 404, f"The model `{model}` does not exist.", "NotFoundError", "model")
            return False
        n = body.get("n", 1)
        if n not in (None, 1):
            self._error(
                conn, 400, "n must be 1 in the simulator (tunedeck sim serves one choice per request)", param="n"
            )
            return False
        return True

    def _request_body(self, req: Request, conn: Conn, *, auth: bool) -> dict[str, Any] | None:
        """A generation request's body once it passed the API key (``auth``: the route asks for it),
        the JSON and :meth:`_common_checks`; None: the error has been answered."""
        if auth and not self._auth_ok(req, conn):
            return None
        body = self._body(req, conn)
        if body is None or not self._common_checks(body, conn):
            return None
        return body

    def _max_tokens(self, body: dict[str, Any], prompt: int, default: int | None, conn: Conn) -> int | None:
        mt = body.get("max_completion_tokens", body.get("max_tokens"))
        if mt is None:
            mt = default if default is not None else self.cfg.context_len - prompt
        if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
            self._error(conn, 400, f"max_tokens must be at least 1, got {mt}.", param="max_tokens")
            return None
        if prompt + mt > self.cfg.context_len:
            self._error(
                conn,
                400,
                f"This model's maximum context length is {self.cfg.context_len} tokens. However, you requested "
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
        body = self._request_body(req, conn, auth=True)
        if body is None:
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
        self._openai_request("completion", body, ids, 16, req, conn)

    def _openai_request(
        self, kind: str, body: dict[str, Any], ids: list[int], default_max: int | None, req: Request, conn: Conn
    ) -> None:
        """An OpenAI-style request (completion or chat) of prompt ``ids``: its token limit checked
        (``default_max`` when the body names none; None: the rest of the context), then run."""
        pt = len(ids)
        mt = self._max_tokens(body, pt, default_max, conn)
        if mt is None:
            return
        stream, inc, cont = self._stream_opts(body)
        r = self.formats.new_req(
            kind,
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
        """Prompt token ids of a chat request (:func:`tunedeck.sim.prefix.chat_ids`): 3 for the template,
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
        # the stand-in tokenizer's ids (tunedeck.sim.prefix): sent back as a prompt, they are the same prompt
        conn.send_json(
            200, {"count": len(ids), "max_model_len": self.cfg.context_len, "tokens": ids, "token_strs": None}
        )

    def r_chat(self, req: Request, conn: Conn) -> None:
        body = self._request_body(req, conn, auth=True)
        if body is None:
            return
        ids = self._chat_tokens(body, conn)
        if ids is not None:
            self._openai_request("chat", body, ids, None, req, conn)

    def r_generate(self, req: Request, conn: Conn) -> None:
        body = self._request_body(req, conn, auth=False)
        if body is None:
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
        r = self.formats.new_req(
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
