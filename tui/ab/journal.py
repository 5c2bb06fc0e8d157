"""The tuning journal: an append-only JSONL log of every A/B, launch and benchmark run.

One JSON object per line in ``<data_dir>/journal.jsonl`` (crash-safe
appends via :class:`tunedeck.util.files.JsonlAppender`; a torn last line is
repaired on the next append and skipped when reading). Every record has
``v`` (format version), ``kind``, ``id`` and ``time`` (UTC ISO-8601).

Kinds:

* ``ab`` — an A/B run. Written at the start (``status: "running"``) and
  again when it ends (``completed`` / ``failed`` / ``cancelled``) with the
  two sides (profile, command, startup time, server log path, startup
  timeline, benchmark run ids and summaries) and the comparison. The latest
  record of an id wins; an A/B whose process died stays ``running`` and is
  listed as ``interrupted``.
* ``launch`` — a server launch: profile, host, launch run id, server log
  path, startup timeline, ready/failed and the diagnosis.
* ``bench`` — a benchmark run: result run id (``tunedeck results show``),
  profile, concurrency, key numbers, and the A/B it belongs to (``ab_id``).
* ``tune`` — a tuning campaign (:mod:`tunedeck.ab.tune`), written at the start and when it
  ends: its SLO, winner (or closest) and every candidate's figures.
"""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from tunedeck.util.files import JsonlAppender, read_jsonl
from tunedeck.util.paths import data_dir

VERSION = 1
KINDS = ("ab", "launch", "bench", "tune")
BENCH_KEYS = (
    "completed",
    "failed",
    "output_throughput",
    "median_tpot_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "p99_itl_ms",
    "max_output_tokens_per_s",
)


def journal_path() -> Path:
    return data_dir() / "journal.jsonl"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def new_id(prefix: str) -> str:
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"


class Journal:
    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else journal_path()

    # -------------------------------------------------------------- writing
    def append(self, record: Mapping[str, Any]) -> dict[str, Any]:
        rec = {"v": VERSION, "time": now_iso(), **record}
        if rec.get("kind") not in KINDS:
            raise ValueError(f"journal record kind must be one of {KINDS}, got {rec.get('kind')!r}")
        if not rec.get("id"):
            rec["id"] = new_id(rec["kind"])
        with JsonlAppender(self.path, sync_every=1) as app:
            app.append(_clean(rec))
        return rec

    def record_bench(
        self,
        run_id: str,
        *,
        profile: str = "",
        host: str = "",
        concurrency: int | None = None,
        summary: Mapping[str, Any] | None = None,
        result_dir: str | None = None,
        ab_id: str | None = None,
        side: str | None = None,
        repeat: int | None = None,
        server_log: str | None = None,
        launch_run_id: str | None = None,
    ) -> dict[str, Any]:
        s = summary or {}
        return self.append(
            {
                "kind": "bench",
                "id": run_id,
                "status": "completed",
                "profile": profile,
                "host": host,
                "concurrency": concurrency,
                "numbers": {k: s[k] for k in BENCH_KEYS if k in s},
                "result_dir": result_dir,
                "ab_id": ab_id,
                "side": side,
                "repeat": repeat,
                "server_log": server_log,
                "launch_run_id": launch_run_id,
            }
        )

    def record_launch(
        self,
        launch_run_id: str | None,
        *,
        profile: str,
        host: str,
        ready: bool,
        startup_s: float | None = None,
        server_log: str | None = None,
        timeline: Iterable[Mapping[str, Any]] = (),
        diagnosis: str | None = None,
        ab_id: str | None = None,
        side: str | None = None,
    ) -> dict[str, Any]:
        return self.append(
            {
                "kind": "launch",
                "id": launch_run_id or new_id("launch"),
                "status": "ready" if ready else "failed",
                "profile": profile,
                "host": host,
                "startup_s": startup_s,
                "server_log": server_log,
                "timeline": list(timeline),
                "diagnosis": diagnosis,
                "ab_id": ab_id,
                "side": side,
            }
        )

    # -------------------------------------------------------------- reading
    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [r for r in read_jsonl(self.path) if isinstance(r, dict) and r.get("kind") in KINDS]

    def entries(self, kind: str | None = None, *, include_results: bool = False) -> list[dict[str, Any]]:
        """One entry per id (its latest record), oldest first; an unfinished A/B reads 'interrupted'.

        ``include_results`` adds the benchmark runs of the results store the journal lacks."""
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        first_time: dict[tuple[str, str], str] = {}
        for r in self.records():
            k = (r["kind"], str(r.get("id")))
            first_time.setdefault(k, r.get("time", ""))
            latest[k] = r
        out = []
        for k, r in latest.items():
            if kind and r["kind"] != kind:
                continue
            r = dict(r)
            r["started"] = first_time[k]
            if r["kind"] in ("ab", "tune") and r.get("status") == "running":
                r["status"] = "interrupted"
            out.append(r)
        if include_results and kind in (None, "bench"):
            out += results_entries({str(k[1]) for k in latest if k[0] == "bench"})
        out.sort(key=lambda r: r.get("started", ""))
        return out

    def find(self, ref: str, kind: str | None = None) -> dict[str, Any] | None:
        """An entry by id or unique id prefix."""
        ents = self.entries(kind)
        exact = [e for e in ents if e.get("id") == ref]
        if exact:
            return exact[-1]
        pre = [e for e in ents if str(e.get("id", "")).startswith(ref)]
        if len(pre) == 1:
            return pre[0]
        return None


def results_entries(known: set[str]) -> list[dict[str, Any]]:
    """Benchmark runs in the results store that the journal does not list yet (run by
    ``tunedeck bench`` directly, or before the journal existed), as ``bench`` entries."""
    root = data_dir() / "results"
    out: list[dict[str, Any]] = []
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        if not d.is_dir() or d.name in known or d.name.startswith("."):
            continue
        try:
            meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        try:
            summary = json.loads((d / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            summary = {}
        if not isinstance(meta, dict) or not isinstance(summary, dict):
            continue
        params = prm if isinstance(prm := meta.get("params"), dict) else {}
        created = meta.get("created")
        when = (
            datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
            if isinstance(created, (int, float))
            else ""
        )
        server = srv if isinstance(srv := meta.get("server"), dict) else {}
        out.append(
            {
                "v": VERSION,
                "kind": "bench",
                "id": d.name,
                "time": when,
                "started": when,
                "status": "partial" if summary.get("partial") or not summary else "completed",
                "profile": meta.get("profile") or "",
                "host": meta.get("target") or "",
                "concurrency": params.get("max_concurrency"),
                "numbers": {k: summary[k] for k in BENCH_KEYS if k in summary},
                "result_dir": str(d),
                "server_log": server.get("server_log"),
                "launch_run_id": server.get("launch_run_id"),
                "source": "results",
            }
        )
    return out


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf become null, tuples lists."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    return str(obj)


# ---------------------------------------------------------------------- export

EXPORT_FIELDS = [
    "time",
    "kind",
    "id",
    "status",
    "profile",
    "host",
    "plan",
    "concurrency",
    "output_throughput",
    "median_tpot_ms",
    "startup_s",
    "headline",
    "server_log",
    "links",
]


def _flat(e: Mapping[str, Any]) -> dict[str, Any]:
    kind = e.get("kind")
    row: dict[str, Any] = {k: "" for k in EXPORT_FIELDS}
    row.update(
        time=e.get("started") or e.get("time", ""),
        kind=kind,
        id=e.get("id", ""),
        status=e.get("status", ""),
        host=e.get("host", ""),
    )
    if kind == "ab":
        a, b = e.get("a") or {}, e.get("b") or {}
        row["profile"] = f"{a.get('profile', '?')} vs {b.get('profile', '?')}"
        row["plan"] = e.get("plan", "")
        cmp = e.get("comparison") or {}
        row["headline"] = cmp.get("headline") or e.get("error") or ""
        ids = []
        logs = []
        for side in (a, b):
            for r in side.get("runs") or ():
                if r.get("server_log"):
                    logs.append(r["server_log"])
                ids += [str(lv.get("run_id")) for lv in r.get("levels") or () if lv.get("run_id")]
        row["server_log"] = " ".join(logs)
        row["links"] = " ".join(ids)
    elif kind == "bench":
        n = e.get("numbers") or {}
        row.update(
            profile=e.get("profile", ""),
            concurrency=e.get("concurrency", ""),
            output_throughput=n.get("output_throughput", ""),
            median_tpot_ms=n.get("median_tpot_ms", ""),
            server_log=e.get("server_log") or "",
            links=" ".join(x for x in (e.get("ab_id"), e.get("launch_run_id")) if x),
        )
    elif kind == "launch":
        st = e.get("startup_s")
        row.update(
            profile=e.get("profile", ""),
            startup_s=round(st, 2) if isinstance(st, float) else st,
            server_log=e.get("server_log") or "",
            headline=e.get("diagnosis") or "",
            links=e.get("ab_id") or "",
        )
    for k, v in list(row.items()):
        if v is None:
            row[k] = ""
        elif isinstance(v, float):
            row[k] = f"{v:.6g}"
    return row


def export(entries: Sequence[Mapping[str, Any]], fmt: str) -> str:
    fmt = fmt.lower()
    if fmt == "json":
        return json.dumps(list(entries), indent=2, ensure_ascii=False) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=EXPORT_FIELDS, lineterminator="\n")
        w.writeheader()
        for e in entries:
            w.writerow(_flat(e))
        return buf.getvalue()
    if fmt in ("md", "markdown"):
        return _markdown(entries)
    raise ValueError(f"unknown export format {fmt!r} (md, csv, json)")


def _esc(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _markdown(entries: Sequence[Mapping[str, Any]]) -> str:
    out = ["# tunedeck tuning journal", ""]
    if not entries:
        return "\n".join(out + ["(empty)", ""])
    out.append("| Time | Kind | Id | Status | Profile | Result | Server log |")
    out.append("|---|---|---|---|---|---|---|")
    for e in entries:
        f = _flat(e)
        result = f["headline"]
        if e.get("kind") == "bench" and f["output_throughput"] != "":
            result = f"C={f['concurrency']}: {f['output_throughput']} tok/s, median TPOT {f['median_tpot_ms']} ms"
        if e.get("kind") == "launch" and not result:
            result = f"ready in {f['startup_s']} s" if e.get("status") == "ready" else "failed"
        out.append(
            f"| {_esc(f['time'])} | {_esc(f['kind'])} | `{_esc(f['id'])}` | {_esc(f['status'])} | "
            f"{_esc(f['profile'])} | {_esc(result)} | {_esc(f['server_log'])} |"
        )
    for e in entries:
        if e.get("kind") != "ab":
            continue
        out += [
            "",
            f"## A/B {e.get('id')}: {(e.get('a') or {}).get('profile')} vs "
            f"{(e.get('b') or {}).get('profile')} ({e.get('status')})",
            "",
        ]
        out.append(
            f"Host `{e.get('host')}`, plan `{e.get('plan')}`, repeats {e.get('repeats')}"
            f"{', interleaved' if e.get('interleave') else ''}."
        )
        if e.get("error"):
            out += ["", f"Stopped: {_esc(e['error'])}"]
        cmp = e.get("comparison")
        if cmp:
            out += ["", f"**{_esc(cmp.get('headline', ''))}**", ""]
            out.append(f"| Metric | {_esc(cmp.get('a'))} | {_esc(cmp.get('b'))} | \u0394 | Verdict |")
            out.append("|---|---:|---:|---:|---|")
            for r in cmp.get("rows") or ():
                unit = r.get("unit", "x")
                delta = "" if r.get("outcome") == "same" else _fmt_delta(r.get("delta_pct"))
                out.append(
                    f"| {_esc(r.get('metric'))} | {_fmt_stat(r.get('a'), unit)} | {_fmt_stat(r.get('b'), unit)} | "
                    f"{delta} | {_esc(r.get('verdict'))} |"
                )
            diff = cmp.get("config_diff") or ()
            if diff:
                out += [
                    "",
                    "Configuration difference (A \u2192 B): "
                    + "; ".join(f"`{d['name']}` {_cfg_val(d.get('a'))} \u2192 {_cfg_val(d.get('b'))}" for d in diff),
                ]
        for side in ("a", "b"):
            s = e.get(side) or {}
            for i, r in enumerate(s.get("runs") or ()):
                ids = ", ".join(f"`{lv.get('run_id')}`" for lv in r.get("levels") or () if lv.get("run_id"))
                st = r.get("startup_s")
                out.append(
                    f"- {side.upper()} run {i + 1}: startup {'N/A' if st is None else f'{st:.1f}'} s, log "
                    f"`{r.get('server_log')}`, results {ids or 'none'}"
                )
    out.append("")
    return "\n".join(out)


def _cfg_val(v: Any) -> str:
    if v is None:
        return "(absent)"
    return "(switch)" if v == "" else f"`{v}`"


def _fmt_stat(s: Any, unit: str = "x") -> str:
    if not s:
        return "N/A"
    m = s.get("mean")
    if m is None:
        return "N/A"
    if unit == "":
        txt = f"{m:,.0f}"
    else:
        txt = f"{m:,.1f}" if abs(m) >= 100 or unit in ("tok/s", "s", "%") else f"{m:,.2f}"
    if s.get("spread") is not None:
        txt += f" \u00b1 {s['spread']:.2g}"
    return txt


def _fmt_delta(d: Any) -> str:
    if d is None:
        return ""
    from tunedeck.ab.compare import fmt_pct

    return fmt_pct(float(d))


__all__ = ["Journal", "export", "journal_path", "new_id", "now_iso"]
