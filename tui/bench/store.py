"""Crash-safe results store: one folder per benchmark run.

``data_dir()/results/<run_id>/``:

* ``meta.json``: written atomically **before the first request** (target,
  profile, server argv/env redacted, engine version, GPUs, client location,
  parameters); updated atomically once the timed phase starts (``bench_start``).
* ``samples.jsonl``: one line per finished request, written by the run's
  writer thread (``JsonlAppender``: one ``write()`` per line on an O_APPEND
  fd, fsync about once a second; a torn tail is repaired on open). The event
  loop only hands records over, so no file I/O runs while timing; a record
  handed over is in the file within milliseconds (well under 1 s), so even
  ``kill -9`` loses only the last instant.
* ``summary.json``: atomic; ``"partial": true`` while or if unfinished;
  :func:`rebuild_summary` recomputes it from the samples.
* ``.lock``: ``fcntl.flock`` held by the one writer while the run is live.

A sweep writes one run per level; the runs share ``meta["sweep_id"]``.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import logging
import math
import os
import queue
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Union, cast

from tunedeck.bench import metrics
from tunedeck.bench.counters import FIGURE_KEYS
from tunedeck.bench.records import LevelSummaryRecord, SampleRecord
from tunedeck.bench.workloads import measured_lengths, workload_of
from tunedeck.util.files import (
    ClosedOnExit,
    JsonlAppender,
    atomic_write_json,
    atomic_write_text,
    read_jsonl,
    remove_stale_temps,
)
from tunedeck.util.safety import redact_env

log = logging.getLogger(__name__)

#: seconds between fsyncs of samples.jsonl by the writer thread
SYNC_INTERVAL = 1.0

SCHEMA_VERSION = 1
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

#: Per-request fields written to samples.jsonl (vLLM's names first, then ours).
SAMPLE_FIELDS = tuple(k for k in SampleRecord.__annotations__ if not k.startswith("_"))


class StoreError(Exception):
    """A results-store problem; the message names the run and the file."""


def results_dir() -> Path:
    from tunedeck.util.paths import data_dir  # imported here: a run with an explicit folder never needs it

    return data_dir() / "results"


def new_run_id(prefix: str = "") -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{prefix}{stamp}-{secrets.token_hex(3)}"


def run_dir(run_id: str, base: Union[str, "os.PathLike[str]", None] = None) -> Path:
    if not _RUN_ID_RE.match(run_id or "") or ".." in run_id:
        raise StoreError(f"run id {run_id!r}: invalid (letters, digits, '.', '_', '-')")
    return (Path(base) if base is not None else results_dir()) / run_id


def redact_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Secret-looking env values are replaced before anything reaches disk."""
    out = dict(meta)
    server = dict(out.get("server") or {})
    if isinstance(server.get("env"), Mapping):
        server["env"] = redact_env(server["env"])
    if server:
        out["server"] = server
    return out


class RunWriter(ClosedOnExit):
    """The single writer of one run folder (holds its ``.lock``).

    ``meta.json`` is written at once (before the first request). After that,
    :meth:`append` and :meth:`update_meta` only queue work for the writer
    thread, which appends each sample with one ``write()`` as soon as it gets
    it, fsyncs about every :data:`SYNC_INTERVAL` seconds, and replaces
    meta.json atomically. ``base``: the results folder (default
    ``data_dir()/results``).
    """

    def __init__(
        self, run_id: str, meta: Mapping[str, Any], *, base: Union[str, "os.PathLike[str]", None] = None
    ) -> None:
        self.run_id = run_id
        self.dir = run_dir(run_id, base)
        self.dir.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(self.dir)
        self._lock_fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise StoreError(f"run {run_id}: another process is writing it ({self.dir}/.lock)") from None
        self.meta = redact_meta(meta)
        self.meta.setdefault("schema_version", SCHEMA_VERSION)
        self.meta["run_id"] = run_id
        atomic_write_json(self.dir / "meta.json", self.meta)
        # fsync is the writer thread's own business (timed), not every N records
        self.samples = JsonlAppender(self.dir / "samples.jsonl", sync_every=1 << 30)
        self.count = 0
        self.error: Optional[BaseException] = None
        self._q: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"results-writer-{run_id}", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- called from the event loop
    def update_meta(self, **fields: Any) -> None:
        self.meta.update(fields)
        self._q.put(("meta", dict(self.meta)))

    def append(self, sample: SampleRecord) -> None:
        d: Mapping[str, Any] = sample  # the stored fields, in their documented order
        rec = {k: d[k] for k in SAMPLE_FIELDS if k in d}
        self._q.put(("sample", rec))
        self.count += 1

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until everything queued so far is written and fsynced."""
        done = threading.Event()
        self._q.put(("flush", done))
        if not done.wait(timeout):
            raise StoreError(f"run {self.run_id}: results writer stalled for {timeout:g} s ({self.dir})")
        if self.error is not None:
            raise StoreError(f"run {self.run_id}: writing {self.dir}: {self.error}")

    def write_summary(self, summary: LevelSummaryRecord) -> None:
        self.flush()
        atomic_write_json(self.dir / "summary.json", finite(dict(summary)))

    def close(self) -> None:
        try:
            if self._thread.is_alive():
                self._q.put(("stop", None))
                self._thread.join(30)
            self.samples.close()
        finally:
            if self._lock_fd >= 0:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
                self._lock_fd = -1

    # ---------------------------------------------------------------- the writer thread
    def _loop(self) -> None:
        q = self._q
        last_sync = time.monotonic()
        dirty = False
        while True:
            wait = SYNC_INTERVAL - (time.monotonic() - last_sync) if dirty else None
            try:
                kind, item = q.get(timeout=max(0.0, wait)) if wait is not None else q.get()
            except queue.Empty:
                kind, item = "sync", None
            try:
                if kind == "sample":
                    self.samples.append(finite(item))
                    dirty = True
                elif kind == "meta":
                    atomic_write_json(self.dir / "meta.json", item)
                if dirty and (kind in ("sync", "flush", "stop") or time.monotonic() - last_sync >= SYNC_INTERVAL):
                    self.samples.sync()
                    dirty = False
                    last_sync = time.monotonic()
            except (OSError, ValueError) as e:
                if self.error is None:
                    log.error("run %s: writing %s failed: %s", self.run_id, self.dir, e)
                self.error = e
            if not dirty:
                last_sync = time.monotonic()
            if kind == "flush":
                item.set()
            elif kind == "stop":
                return


def finite(obj: Any) -> Any:
    """JSON has no NaN/inf: inf becomes the string "inf" (vLLM's request_rate), NaN None."""
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    path: Path
    meta: dict[str, Any]
    summary: Optional[LevelSummaryRecord]
    live: bool  # a writer holds the lock

    @property
    def partial(self) -> bool:
        return self.summary is None or bool(self.summary.get("partial"))


def _read_json(p: Path) -> Optional[Dict[str, Any]]:
    try:
        with open(p, "rb") as f:
            v = json.load(f)
        return v if isinstance(v, dict) else None
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None


def is_live(path: Path) -> bool:
    lock = path / ".lock"
    if not lock.exists():
        return False
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def load_run(run_id: str) -> RunInfo:
    d = run_dir(run_id)
    if not d.is_dir():
        raise StoreError(f"run {run_id}: not found in {results_dir()}")
    meta = _read_json(d / "meta.json")
    if meta is None:
        raise StoreError(f"run {run_id}: {d / 'meta.json'} is missing or unreadable")
    summary = cast(Optional[LevelSummaryRecord], _read_json(d / "summary.json"))
    return RunInfo(run_id, d, meta, summary, is_live(d))


def list_runs() -> list[RunInfo]:
    base = results_dir()
    out: list[RunInfo] = []
    if not base.is_dir():
        return out
    for d in sorted(base.iterdir()):
        if not d.is_dir() or not _RUN_ID_RE.match(d.name):
            continue
        try:
            out.append(load_run(d.name))
        except StoreError:
            continue
    return out


def read_samples(run_id: str) -> list[SampleRecord]:
    p = run_dir(run_id) / "samples.jsonl"
    if not p.exists():
        return []
    return [cast(SampleRecord, s) for s in read_jsonl(p) if isinstance(s, dict)]


def summarize(
    samples: Sequence[SampleRecord],
    meta: Mapping[str, Any],
    *,
    duration: Optional[float] = None,
    partial: bool = False,
    client: Optional[Mapping[str, Any]] = None,
) -> LevelSummaryRecord:
    """Summary JSON (vLLM keys + ours) for a run's samples and meta."""
    p = meta.get("params") or {}
    percentiles = p.get("percentiles") or list(metrics.DEFAULT_PERCENTILES)
    rate = p.get("request_rate", "inf")
    rate_f = math.inf if rate in ("inf", None) else float(rate)
    if duration is None:
        duration = _duration_from_samples(samples, meta)
    res: dict[str, Any] = {
        "date": meta.get("date") or time.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai-chat" if p.get("endpoint") == "chat" else "openai",
        "backend": "openai-chat" if p.get("endpoint") == "chat" else "openai",
        "label": meta.get("label") or None,
        "model_id": meta.get("model"),
        "tokenizer_id": p.get("tokenizer"),
        "num_prompts": p.get("num_prompts"),
        "request_rate": rate if rate == "inf" else rate_f,
        "burstiness": p.get("burstiness", 1.0),
        "max_concurrency": p.get("max_concurrency"),
    }
    res.update(
        metrics.calculate_metrics(
            samples,
            duration,
            percentiles=percentiles,
            goodput=p.get("goodput") or None,
            max_concurrency=p.get("max_concurrency"),
            request_rate=rate_f,
            input_len=p.get("input_len"),
        )
    )
    res["run_id"] = meta.get("run_id")
    res["sweep_id"] = meta.get("sweep_id")
    res["partial"] = partial
    res["params"] = dict(p)
    # the server's own counters over the level (tunedeck.bench.counters); null where it did not say
    sc = meta.get("server_counters")
    sc = sc if isinstance(sc, Mapping) else {}
    for k in FIGURE_KEYS:
        res[k] = sc.get(k)
    res["server_counters_note"] = sc.get("server_counters_note")
    cl = dict(meta.get("client") or {})
    if client:
        cl.update(client)
    res["client"] = cl
    res["workload"] = workload_of(meta)
    for key in ("workload_lengths", "workload_skipped", "context_limit"):
        if isinstance(meta.get(key), Mapping):
            res[key] = dict(meta[key])
    res["measured_lengths"] = measured_lengths(samples)
    if isinstance(meta.get("deployment"), Mapping):
        res["deployment"] = dict(meta["deployment"])  # a multi-node deployment, benchmarked on its head
    res["client_bound"] = bool(cl.get("client_bound"))
    res["machine_busy"] = bool(cl.get("machine_busy"))
    res["schema_version"] = SCHEMA_VERSION
    return cast(LevelSummaryRecord, res)  # the keys LevelSummaryRecord names, and the statistics


def _duration_from_samples(samples: Sequence[SampleRecord], meta: Mapping[str, Any]) -> float:
    if not samples:
        return 0.0
    start = meta.get("bench_start")
    ends = [s.get("start_time", 0.0) + max(s.get("elapsed") or 0.0, s.get("latency") or 0.0) for s in samples]
    if not isinstance(start, (int, float)):
        start = min(s.get("start_time", 0.0) - (s.get("client_queue_time") or 0.0) for s in samples)
    return max(0.0, float(max(ends) - start))


def rebuild_summary(run_id: str, *, write: bool = True) -> LevelSummaryRecord:
    """Recompute the summary from samples.jsonl. A run without a final summary is ``partial``.

    Written back atomically unless the run is live (a writer holds the lock) or ``write`` is False.
    """
    info = load_run(run_id)
    samples = read_samples(run_id)
    old = info.summary or {}
    finished = bool(old) and not old.get("partial")
    duration = old.get("duration") if finished else None
    summary = summarize(
        samples, info.meta, duration=duration, partial=not finished or info.live, client=old.get("client")
    )
    if info.live:
        summary["live"] = True
    elif write:
        atomic_write_json(info.path / "summary.json", finite(summary))
    return summary


def summary_for(run_id: str) -> LevelSummaryRecord:
    """The stored summary, rebuilt from samples when missing, partial or the run is live."""
    info = load_run(run_id)
    if info.summary is not None and not info.summary.get("partial") and not info.live:
        return info.summary
    return rebuild_summary(run_id)


# ---------------------------------------------------------------- export


CSV_FIELDS = (
    "index",
    "success",
    "error_type",
    "ttft",
    "latency",
    "prompt_len",
    "output_tokens",
    "n_itl",
    "mean_itl",
    "tpot",
    "start_time",
    "wall_start",
    "client_queue_time",
    "send_time",
    "tokens_per_event",
    "usage_present",
    "bad_lines",
    "worker",
    "error",
)


def export_csv(run_id: str, dest: Union[str, "os.PathLike[str]"]) -> int:
    """One row per request; returns the number of rows."""
    rows = read_samples(run_id)
    dest = Path(dest)
    f = io.StringIO(newline="")
    w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    for s in rows:
        itl = s.get("itl") or []
        tp = metrics.tpot(s) if s.get("success") else None
        w.writerow(
            {
                **s,
                "n_itl": len(itl),
                "mean_itl": metrics.mean(itl) if itl else "",
                "tpot": "" if tp is None else tp,
                "itl": None,
            }
        )
    atomic_write_text(dest, f.getvalue())
    return len(rows)


def to_vllm_arrays(samples: Iterable[SampleRecord]) -> dict[str, list[Any]]:
    """vLLM's per-request array layout (request order); failed requests: ttft 0, itls [], output 0."""
    s_sorted = sorted(samples, key=lambda s: s.get("index", 0))
    out: dict[str, list[Any]] = {
        "input_lens": [],
        "output_lens": [],
        "ttfts": [],
        "itls": [],
        "latencies": [],
        "start_times": [],
        "errors": [],
        "queue_times": [],
        "generated_texts": [],
    }
    for s in s_sorted:
        ok = bool(s.get("success"))
        out["input_lens"].append(s.get("prompt_len", 0))
        out["output_lens"].append(metrics.output_len(s) if ok else 0)
        out["ttfts"].append(s.get("ttft", 0.0) if ok else 0.0)
        out["itls"].append(list(s.get("itl") or []) if ok else [])
        out["latencies"].append(s.get("latency", 0.0) if ok else 0.0)
        out["start_times"].append(s.get("start_time", 0.0))
        out["errors"].append("" if ok else (s.get("error") or s.get("error_type") or ""))
        out["queue_times"].append(s.get("client_queue_time", 0.0))
        out["generated_texts"].append("")
    return out


def export_vllm_json(run_id: str, dest: Union[str, "os.PathLike[str]"]) -> None:
    """vLLM's result file layout: summary keys plus the per-request arrays."""
    summary = summary_for(run_id)
    data = {**summary, **to_vllm_arrays(read_samples(run_id))}
    atomic_write_text(dest, json.dumps(finite(data), indent=2) + "\n")
