"""Workloads read from files: ``sharegpt``, ``custom``, ``mooncake`` and ``burstgpt``.

A malformed record is one :class:`WorkloadError` naming the file and the line (or record);
nothing is sent then. Records that are well formed but unusable (too short or too long,
a failed request in a trace) are skipped and counted by reason.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import random
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from tunedeck.bench.client import RequestSpec
from tunedeck.bench.workloads.base import (
    MOONCAKE_BLOCK,
    Material,
    Prompt,
    Workload,
    WorkloadError,
    check_float,
    check_int,
    estimate_tokens,
    finish,
)


def read_text(path: Optional[str], source: str) -> Tuple[str, str]:
    """(text, sha256 of the bytes) of a dataset file; WorkloadError naming the file (missing,
    unreadable, empty or not UTF-8)."""
    if not path:
        raise WorkloadError(f"{source}: needs a file (--dataset-path)")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise WorkloadError(f"{path}: is a folder, not a {source} file") from None
    except OSError as e:
        raise WorkloadError(f"{path}: cannot read it ({e.strerror or e})") from None
    if not data:
        raise WorkloadError(f"{path}: the file is empty (0 bytes); expected a {source} file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise WorkloadError(f"{path}:{line}: not UTF-8 text (byte {e.start})") from None
    return text, hashlib.sha256(data).hexdigest()


def _jsonl(path: str, text: str) -> Iterator[Tuple[int, Dict[str, Any]]]:
    """(line number, object) for every non-blank line. Lines end at ``\n`` only: U+2028, U+2029 and
    U+0085 may stand unescaped inside a JSON string (``str.splitlines`` would cut there)."""
    for no, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise WorkloadError(f"{path}:{no}: not valid JSON ({e})") from None
        if not isinstance(obj, dict):
            raise WorkloadError(f"{path}:{no}: expected a JSON object, got {type(obj).__name__}")
        yield no, obj


def _whole(v: Any, lo: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo


def _count(skipped: Dict[str, int], why: str) -> None:
    skipped[why] = skipped.get(why, 0) + 1


def _sample(rows: List[RequestSpec], n: int, seed: int) -> List[RequestSpec]:
    """vLLM's sampling of a dataset: shuffled by seed, the first ``n``; fewer rows are drawn again."""
    rng = random.Random(seed)
    order = list(rows)
    rng.shuffle(order)
    out = order[:n]
    while order and len(out) < n:
        out.append(rng.choice(order))
    return [RequestSpec(s.prompt, s.prompt_len, s.output_len, 0, s.exact) for s in out]  # the rows stay as read


#: the last dataset read: (its key, (rows, skipped, sha256)); a sweep builds each level from it
_last_read: Optional[Tuple[Tuple[Any, ...], Tuple[List[RequestSpec], Dict[str, int], str]]] = None


_Rows = Tuple[List[RequestSpec], Dict[str, int], str]


def _rows_cached(kind: str, path: Optional[str], args: Tuple[Any, ...], read: Callable[..., _Rows]) -> _Rows:
    """``read(path, *args)``, once per file content (size and mtime) and options."""
    global _last_read
    try:
        st = os.stat(path) if path else None
    except OSError:
        st = None  # read() names the problem
    key = (kind, path, args, st.st_size if st else None, st.st_mtime_ns if st else None)
    if st is not None and _last_read is not None and _last_read[0] == key:
        return _last_read[1]
    got = read(path, *args)
    if st is not None:
        _last_read = (key, got)
    return got


def _over(limit: Optional[int], prompt_len: int, output_len: int) -> bool:
    return limit is not None and prompt_len + output_len > limit


def sharegpt(params: Mapping[str, Any], path: Optional[str], n: int, seed: int, limit: Optional[int]) -> Workload:
    out_len = check_int(params, "output_len", None)
    max_prompt = check_int(params, "max_prompt_len", 1024)
    max_total = check_int(params, "max_total_len", 2048)
    rows, skipped, sha = _rows_cached("sharegpt", path, (out_len, max_prompt, max_total, limit), _sharegpt_rows)
    assert path is not None
    eff: Dict[str, Any] = {"output_len": out_len, "max_prompt_len": max_prompt, "max_total_len": max_total}
    eff["file_sha256"] = sha
    return finish("sharegpt", eff, _sample(rows, n, seed) if rows else [], skipped, path, lengths="estimate")


def _sharegpt_rows(
    path: Optional[str],
    out_len: Optional[int],
    max_prompt: Optional[int],
    max_total: Optional[int],
    limit: Optional[int],
) -> Tuple[List[RequestSpec], Dict[str, int], str]:
    text, sha = read_text(path, "sharegpt")
    assert path is not None
    try:
        data = json.loads(text)
    except ValueError as e:
        line = getattr(e, "lineno", None)
        raise WorkloadError(f"{path}{':' + str(line) if line else ''}: not valid JSON ({e})") from None
    if not isinstance(data, list):
        raise WorkloadError(f"{path}: expected a JSON list of conversations, got {type(data).__name__}")
    skipped: Dict[str, int] = {}
    rows: List[RequestSpec] = []
    for i, rec in enumerate(data):
        where = f"{path}: record {i}" + (f" (id {rec.get('id')!r})" if isinstance(rec, dict) and "id" in rec else "")
        conv = rec.get("conversations") if isinstance(rec, dict) else None
        if not isinstance(conv, list):
            raise WorkloadError(f"{where}: expected an object with a 'conversations' list")
        for j, turn in enumerate(conv):
            if (
                not isinstance(turn, dict)
                or not isinstance(turn.get("from"), str)
                or not isinstance(turn.get("value"), str)
            ):
                raise WorkloadError(f"{where}: turn {j} needs string 'from' and 'value'")
        first = next((j for j, t in enumerate(conv) if t["from"] == "human"), None)
        if first is None or first + 1 >= len(conv) or conv[first + 1]["from"] != "gpt":
            _count(skipped, "no_human_then_gpt_turn")
            continue
        prompt = conv[first]["value"]
        plen = estimate_tokens(prompt)
        olen = out_len if out_len is not None else estimate_tokens(conv[first + 1]["value"])
        # vLLM's is_valid_sequence: both at least 4 tokens (the output check only without an override)
        if plen < 4 or (out_len is None and olen < 4):
            _count(skipped, "too_short")
            continue
        if (max_prompt is not None and plen > max_prompt) or (max_total is not None and plen + olen > max_total):
            _count(skipped, "too_long")
            continue
        if _over(limit, plen, olen):
            _count(skipped, "over_context_limit")
            continue
        rows.append(RequestSpec(prompt, plen, olen, 0, False))
    return rows, skipped, sha


def custom(params: Mapping[str, Any], path: Optional[str], n: int, seed: int, limit: Optional[int]) -> Workload:
    out_len = check_int(params, "output_len", None)
    rows, skipped, sha = _rows_cached("custom", path, (out_len, limit), _custom_rows)
    assert path is not None
    eff = {"output_len": out_len, "file_sha256": sha}
    return finish("custom", eff, _sample(rows, n, seed) if rows else [], skipped, path, lengths="estimate")


#: a custom line's output length without ``output_len`` and ``--custom-output-len``: vLLM's default
CUSTOM_OUTPUT_LEN = 256


def _custom_rows(
    path: Optional[str], out_len: Optional[int], limit: Optional[int]
) -> Tuple[List[RequestSpec], Dict[str, int], str]:
    text, sha = read_text(path, "custom")
    assert path is not None
    skipped: Dict[str, int] = {}
    rows: List[RequestSpec] = []
    for no, obj in _jsonl(path, text):
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise WorkloadError(f"{path}:{no}: 'prompt' must be a non-empty string")
        olen = obj.get("output_len")
        if out_len is not None:
            olen = out_len
        elif olen is None:
            olen = CUSTOM_OUTPUT_LEN
        elif not _whole(olen, 1):
            raise WorkloadError(f"{path}:{no}: 'output_len' {olen!r} is not a whole number >= 1")
        plen = estimate_tokens(prompt)
        if _over(limit, plen, olen):
            _count(skipped, "over_context_limit")
            continue
        rows.append(RequestSpec(prompt, plen, olen, 0, False))
    return rows, skipped, sha


def _speed(params: Mapping[str, Any]) -> float:
    v = check_float(params, "trace_speed", 1.0, lo=1e-6)
    if math.isinf(v):
        raise WorkloadError(f"workload option trace_speed = {v!r}: expected a finite number > 0")
    return v


class _Trace:
    """A trace being replayed: its file (read and hashed), its rows' timestamps checked in order,
    and each request sent its row's time after the first request's row, ``trace_speed`` times
    faster; the requests and what was skipped, by reason."""

    def __init__(self, source: str, params: Mapping[str, Any], path: Optional[str], column: str, unit: str) -> None:
        self.source = source
        self.speed = _speed(params)
        self.text, self.sha = read_text(path, source)
        assert path is not None  # read_text refuses a missing one
        self.path = path
        #: the timestamp column's name, its unit and how many of it make a second
        self.column, self.unit = column, unit
        self.per_s = {"ms": 1000.0, "s": 1.0}[unit]
        self.specs: List[RequestSpec] = []
        self.skipped: Dict[str, int] = {}
        self._prev: Optional[float] = None
        self._t0: Optional[float] = None

    def in_order(self, no: int, ts: float) -> None:
        """WorkloadError naming line ``no`` when its timestamp is before the previous row's."""
        if self._prev is not None and ts < self._prev:
            raise WorkloadError(
                f"{self.path}:{no}: {self.column} {ts:g} {self.unit} is before the previous row's "
                f"{self._prev:g} {self.unit}"
            )
        self._prev = ts

    def add(self, spec: RequestSpec, ts: float) -> None:
        if self._t0 is None:
            self._t0 = ts
        spec.at_s = (ts - self._t0) / self.per_s / self.speed
        self.specs.append(spec)

    def workload(self, token_ids: bool) -> Workload:
        eff = {"trace_speed": self.speed, "file_sha256": self.sha}
        lengths = "token-ids" if token_ids else "estimate"
        return finish(self.source, eff, self.specs, self.skipped, self.path, lengths=lengths)


class _Blocks:
    """Mooncake's hash ids: each names a 512-token block; the same id always gives the same block."""

    def __init__(self, mat: Material) -> None:
        self.mat = mat
        self.cache: Dict[int, Prompt] = {}

    def block(self, hid: int) -> Prompt:
        b = self.cache.get(hid)
        if b is None:
            b = self.cache[hid] = self.mat.piece(MOONCAKE_BLOCK, random.Random(f"mooncake-block-{hid}"))
        return b

    def cut(self, b: Prompt, k: int) -> Prompt:
        if isinstance(b, list):
            return b[:k]
        return " ".join(b.split(" ")[:k])

    def prompt(self, hash_ids: List[int], length: int, rng: random.Random) -> Prompt:
        parts: List[Prompt] = []
        left = length
        for i in range(math.ceil(length / MOONCAKE_BLOCK)):
            k = min(MOONCAKE_BLOCK, left)
            b = self.block(hash_ids[i]) if i < len(hash_ids) else self.mat.piece(MOONCAKE_BLOCK, rng)
            parts.append(b if k == MOONCAKE_BLOCK else self.cut(b, k))
            left -= k
        return self.mat.join(parts)


def mooncake(
    params: Mapping[str, Any], path: Optional[str], n: int, seed: int, limit: Optional[int], token_ids: bool
) -> Workload:
    trace = _Trace("mooncake", params, path, "timestamp", "ms")
    blocks = _Blocks(Material(token_ids))
    rng = random.Random(seed)
    for no, obj in _jsonl(trace.path, trace.text):
        ts, inp, out, ids = obj.get("timestamp"), obj.get("input_length"), obj.get("output_length"), obj.get("hash_ids")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
            raise WorkloadError(f"{path}:{no}: 'timestamp' {ts!r} is not a time in ms >= 0")
        if not _whole(inp, 1):
            raise WorkloadError(f"{path}:{no}: 'input_length' {inp!r} is not a whole number >= 1")
        if not _whole(out, 1):
            raise WorkloadError(f"{path}:{no}: 'output_length' {out!r} is not a whole number >= 1")
        if ids is None:
            ids = []
        if not isinstance(ids, list) or not all(_whole(h) for h in ids):
            raise WorkloadError(f"{path}:{no}: 'hash_ids' must be a list of whole numbers >= 0")
        trace.in_order(no, ts)
        assert isinstance(inp, int) and isinstance(out, int)  # checked above
        if len(trace.specs) >= n:
            continue  # the rest is still checked: a bad trace is refused whole
        if _over(limit, inp, out):
            _count(trace.skipped, "over_context_limit")
            continue
        trace.add(RequestSpec(blocks.prompt(ids, inp, rng), inp, out, 0, token_ids), ts)
    return trace.workload(token_ids)


BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


def burstgpt(
    params: Mapping[str, Any], path: Optional[str], n: int, seed: int, limit: Optional[int], token_ids: bool
) -> Workload:
    trace = _Trace("burstgpt", params, path, "Timestamp", "s")
    reader = csv.DictReader(io.StringIO(trace.text, newline=""))
    header = reader.fieldnames or []
    missing = [c for c in BURSTGPT_COLUMNS if c not in header]
    if missing:
        raise WorkloadError(f"{path}:1: no column {', '.join(repr(c) for c in missing)} in the header")
    mat = Material(token_ids)
    rng = random.Random(seed)
    try:
        for row in reader:
            no = reader.line_num
            try:
                ts = float(row["Timestamp"])
            except (TypeError, ValueError):
                raise WorkloadError(f"{path}:{no}: Timestamp {row['Timestamp']!r} is not a number of seconds") from None
            if not math.isfinite(ts) or ts < 0:
                raise WorkloadError(f"{path}:{no}: Timestamp {row['Timestamp']!r} is not a time in s >= 0")
            vals = []
            for col in BURSTGPT_COLUMNS[1:]:
                raw = row[col]
                try:
                    v = int(raw)
                except (TypeError, ValueError):
                    v = -1
                if v < 0:
                    raise WorkloadError(f"{path}:{no}: {col} {raw!r} is not a whole number >= 0")
                vals.append(v)
            trace.in_order(no, ts)
            inp, out = vals
            if len(trace.specs) >= n:
                continue
            if out == 0:
                _count(trace.skipped, "zero_response_tokens")  # a failed request in the trace
                continue
            if inp == 0:
                _count(trace.skipped, "zero_request_tokens")
                continue
            if _over(limit, inp, out):
                _count(trace.skipped, "over_context_limit")
                continue
            trace.add(RequestSpec(mat.piece(inp, rng), inp, out, 0, token_ids), ts)
    except csv.Error as e:
        raise WorkloadError(f"{path}:{reader.line_num}: not valid CSV ({e})") from None
    return trace.workload(token_ids)
