"""Incremental Server-Sent Events parsing of an OpenAI-compatible stream.

Rules (docs/benchmark-metrics.md §1): split on blank lines, skip ``:``
comments, strip ``data: ``, stop at ``[DONE]``. An *output event* has a
non-empty ``choices`` array (its text may be empty); the usage chunk
(``choices: []``) moves no timestamp. In chat streams the role-only opening
chunk is skipped, like vLLM 0.33.0's client.
"""

from __future__ import annotations

import json
from typing import Any, List, Optional, Tuple

_DONE = b"[DONE]"


class SSEParser:
    """Incremental SSE reader for one response.

    ``feed(t, body)`` gets each body piece with the time its read arrived; every
    event block completed by that piece is parsed at once (after the timestamp
    was taken, so parsing never delays a stamp) and, when it is an output event
    (non-empty ``choices``), its time is appended to ``times``.
    """

    __slots__ = ("bad", "buf", "chat", "done", "error", "events", "finish", "sep", "text", "times", "usage")

    def __init__(self, chat: bool = False, keep: bool = False, keep_text: bool = False) -> None:
        self.buf = b""
        self.sep = b""
        self.times: List[float] = []
        self.usage: Any = None
        self.done = False
        self.finish: Any = None
        self.bad = 0
        self.error: Optional[str] = None
        self.chat = chat
        #: raw (time, block) pairs, kept only on request (precision checks)
        self.events: Optional[List[Tuple[float, bytes]]] = [] if keep else None
        #: the answer's text pieces, kept only on request (a conversation's next turn carries it)
        self.text: Optional[List[str]] = [] if keep_text else None

    def feed(self, t: float, data: bytes) -> None:
        if self.buf:
            data = self.buf + data
        sep = self.sep
        if not sep:
            sep = self.sep = b"\r\n\r\n" if b"\r\n" in data[:512] else b"\n\n"
        ls = len(sep)
        start = 0
        while True:
            i = data.find(sep, start)
            if i < 0:
                break
            self.block(t, data[start:i])
            start = i + ls
        self.buf = data[start:] if start < len(data) else b""

    def end(self, t: float) -> None:
        """The body ended: a last event without its blank line still counts."""
        rest = self.buf.strip()
        self.buf = b""
        if rest:
            self.block(t, rest)

    def block(self, t: float, block: bytes) -> None:
        if self.events is not None:
            self.events.append((t, block))
        if self.done:
            return
        if block.startswith(b"data: ") and b"\n" not in block:
            payload = block[6:].rstrip(b"\r")
        else:
            parts = []
            for line in block.split(b"\n"):
                line = line.rstrip(b"\r")
                if line.startswith(b"data:"):
                    v = line[5:]
                    parts.append(v[1:] if v.startswith(b" ") else v)
                elif not line or line.startswith(b":") or line.startswith((b"event:", b"id:", b"retry:")):
                    continue
                else:
                    self.bad += 1
            if not parts:
                return
            payload = b"\n".join(parts)
        if payload == _DONE:
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            self.bad += 1
            return
        if not isinstance(obj, dict):
            self.bad += 1
            return
        usage = obj.get("usage")
        if usage:
            self.usage = usage
        choices = obj.get("choices")
        if choices:
            c0 = choices[0] if isinstance(choices[0], dict) else {}
            fr = c0.get("finish_reason")
            if fr:
                self.finish = fr
            if self.chat and not self.times:
                delta = c0.get("delta") or {}
                # vLLM 0.33.0 skips the role-only opening chunk (no content of any kind yet).
                if (
                    delta.get("role")
                    and not fr
                    and not delta.get("content")
                    and not delta.get("reasoning_content")
                    and not delta.get("reasoning")
                    and not delta.get("tool_calls")
                ):
                    return
            self.times.append(t)
            if self.text is not None:
                piece = (c0.get("delta") or {}).get("content") if self.chat else c0.get("text")
                if isinstance(piece, str):
                    self.text.append(piece)
        elif obj.get("error") is not None:
            err = obj["error"]
            self.error = err.get("message", str(err)) if isinstance(err, dict) else str(err)
