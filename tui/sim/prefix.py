"""What the serving model reads from a prompt's content (docs/sim-model.md, "Workload-dependent serving").

* Token ids: the simulator has no vocabulary; a text is one token per 4 UTF-8 bytes (at least
  one), each 4-byte group read as a little-endian number modulo :data:`VOCAB`. ``/tokenize`` returns these ids, so a prompt sent as text and as its ids is one prompt.
* Block hashes: the prompt's full blocks of ``block`` tokens, each hash chained to the one before (a
  block hits only when everything before it hits too), as vLLM's prefix cache keys its blocks.
* :class:`PrefixCache`: an LRU set of block hashes with a capacity in blocks.
* :func:`repetition`: the bigram repetition statistic behind speculative acceptance (:mod:`tunedeck.sim.perf`).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from typing import Any, Sequence

#: ids of the simulator's stand-in tokenizer lie in [0, VOCAB)
VOCAB = 151_936
#: the simulator's cache granularity in tokens (vLLM's default --block-size; SGLang's radix tree, page
#: size 1, is matched at this granularity too)
BLOCK = 16
#: the repetition statistic reads at most this many leading tokens of a prompt
REPETITION_WINDOW = 8192
#: a chat message's role header in tokens; the generation prompt at the end is 3 tokens
_ROLE_TOKENS = 4
_ASSISTANT = b"<|assistant>"  # 3 tokens


def text_ids(text: str) -> list[int]:
    """The stand-in token ids of ``text``: one per 4 UTF-8 bytes (at least one)."""
    return _byte_ids(text.encode("utf-8"))


def _byte_ids(b: bytes) -> list[int]:
    pad = -len(b) % 4
    if pad or not b:
        b += b"\0" * (pad or 4)
    return [x % VOCAB for x in struct.unpack(f"<{len(b) // 4}I", b)]


def message_text(content: Any) -> str:
    """A chat message's content as text: a string, or the ``text`` of each part of a part list."""
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


def chat_ids(messages: Sequence[dict[str, Any]]) -> list[int]:
    """Token ids of a chat prompt: per message a 4-token role header and its content, then a
    3-token generation prompt (as many tokens as :meth:`tunedeck.sim.api.Api._chat_tokens` counts)."""
    ids: list[int] = []
    for msg in messages:
        role = str(msg.get("role", "")).encode("utf-8")[: 4 * _ROLE_TOKENS]
        ids += _byte_ids(role.ljust(4 * _ROLE_TOKENS, b"\n"))
        ids += text_ids(message_text(msg.get("content")))
    ids += _byte_ids(_ASSISTANT)
    return ids


def block_hashes(ids: Sequence[int], block: int = BLOCK) -> list[int]:
    """Chained hashes of the full ``block``-token blocks of ``ids`` (a partial last block has none)."""
    out: list[int] = []
    h = 0
    for i in range(0, len(ids) - block + 1, block):
        h = hash((h, tuple(ids[i : i + block])))
        out.append(h)
    return out


def repetition(ids: Sequence[int]) -> tuple[int, int]:
    """(bigrams that occurred earlier in the prompt, bigrams) over its first :data:`REPETITION_WINDOW` tokens."""
    head = ids[:REPETITION_WINDOW]
    pairs = list(zip(head, head[1:]))
    return len(pairs) - len(set(pairs)), len(pairs)


class PrefixCache:
    """An LRU set of block hashes holding at most ``capacity`` blocks (0: holds nothing).

    A request's blocks are touched last block first, so that of one prompt's blocks the leading
    ones are the most recently used and are evicted last (vLLM frees a request's blocks in
    reverse order for the same reason: a block is useless once the one before it is gone).
    """

    def __init__(self, block: int, capacity: int = 0) -> None:
        self.block = block
        self.capacity = capacity
        self.blocks: OrderedDict[int, None] = OrderedDict()
        #: blocks evicted since the start
        self.evicted = 0

    def resize(self, capacity: int) -> None:
        self.capacity = max(0, capacity)
        self._evict()

    def match(self, hashes: Sequence[int], limit: int) -> int:
        """How many leading blocks of ``hashes`` (at most ``limit``) are cached; marks them used."""
        n = 0
        blocks = self.blocks
        for h in hashes[: max(0, limit)]:
            if h not in blocks:
                break
            n += 1
        for h in reversed(hashes[:n]):
            blocks.move_to_end(h)
        return n

    def insert(self, hashes: Sequence[int]) -> None:
        """Cache ``hashes`` (a prompt's blocks, in order), evicting the least recently used beyond capacity."""
        blocks = self.blocks
        for h in reversed(hashes):
            blocks[h] = None
            blocks.move_to_end(h)
        self._evict()

    def clear(self) -> None:
        self.blocks.clear()

    def _evict(self) -> None:
        blocks = self.blocks
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
            self.evicted += 1
