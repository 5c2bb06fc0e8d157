"""The parts of a report, from what the stores keep.

Every report is made of the same parts over one or more :class:`~tunedeck.ab.sides.Side` objects:
a benchmark result (a run, or a sweep's runs) is one side, an A/B two, a campaign one per
candidate. Per level: the latency and throughput table and charts (TTFT and TPOT p50/p90/p99,
output tok/s), the throughput over time (the level's ``timeline.jsonl``, else rebuilt from its
samples), the validity findings; then the commands (profile, the engine's argv and env with
secrets redacted) and the environment (host, GPUs, engine version, workload and its sha256),
read from each level's ``meta.json``.
"""

from __future__ import annotations

import logging
import shlex
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

from tunedeck.ab.compare import Comparison
from tunedeck.ab.render import fmt_delta, fmt_value
from tunedeck.ab.series import run_series
from tunedeck.ab.sides import LevelResult, Side, summary_number
from tunedeck.bench.store import StoreError, load_run, run_dir
from tunedeck.bench.workloads import describe, workload_of
from tunedeck.hostside.timeline import read_timeline
from tunedeck.report.parts import BarChart, Code, LineChart, Notes, Part, Report, Section, Series, Table
from tunedeck.util.safety import redact_argv, redact_env

log = logging.getLogger(__name__)

#: (title, summary key) of the percentiles charted and tabled
PERCENTILES = (("p50", "median"), ("p90", "p90"), ("p99", "p99"))
#: timeline charts drawn at most (a longer sweep's other levels are in the table)
MAX_TIMELINES = 12


def now_text() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def num_text(v: float | None, spec: str = ",.1f") -> str:
    return "N/A" if v is None else format(v, spec)


def _levels(side: Side) -> list[tuple[int, LevelResult]]:
    """(repeat index, level) of every level of every repeat."""
    return [(i, lv) for i, run in enumerate(side.runs) for lv in run.levels]


def _mean_at(side: Side, c: int, key: str) -> float | None:
    vals = [v for run in side.runs if (lv := run.level(c)) for v in [summary_number(lv.summary, key)] if v is not None]
    return sum(vals) / len(vals) if vals else None


def _meta(run_id: str | None) -> dict[str, Any]:
    """A level's ``meta.json`` from the results store ({} when it is not here)."""
    if not run_id:
        return {}
    try:
        return load_run(run_id).meta
    except StoreError as e:
        log.info("report: no meta for %s: %s", run_id, e)
        return {}


def _first_meta(side: Side) -> dict[str, Any]:
    for _, lv in _levels(side):
        m = _meta(lv.run_id)
        if m:
            return m
    return {}


def _map(v: Any) -> Mapping[str, Any]:
    """``v`` when it is an object, else an empty one (stored JSON is not trusted to have a shape)."""
    return v if isinstance(v, Mapping) else {}


def _validity_text(summary: Mapping[str, Any]) -> str:
    v = summary.get("validity")
    if not isinstance(v, list):
        return "not checked"
    return "valid" if not v else ", ".join(str(f.get("rule")) for f in v if isinstance(f, Mapping))


# ---------------------------------------------------------------------- per level


def level_table(sides: Sequence[Side], names: Sequence[str]) -> Table:
    """One row per side, repeat and level: requests, output tok/s, TTFT and TPOT percentiles."""
    headers = ["Side", "C", "OK", "Failed", "Output tok/s"]
    headers += [f"TTFT {p} ms" for p, _ in PERCENTILES] + [f"TPOT {p} ms" for p, _ in PERCENTILES]
    headers += ["Validity"]
    rows = []
    for side, name in zip(sides, names):
        for i, lv in _levels(side):
            s = lv.summary
            label = name + (f" r{i + 1}" if len(side.runs) > 1 else "")
            row = [label, str(lv.concurrency)]
            row += [num_text(summary_number(s, "completed"), ",.0f"), num_text(summary_number(s, "failed"), ",.0f")]
            row.append(num_text(summary_number(s, "output_throughput")))
            for metric in ("ttft", "tpot"):
                row += [num_text(summary_number(s, f"{k}_{metric}_ms"), ",.2f") for _, k in PERCENTILES]
            row.append(_validity_text(s) + (" (partial)" if s.get("partial") else ""))
            rows.append(tuple(row))
    return Table(tuple(headers), tuple(rows), numeric=tuple(range(1, len(headers) - 1)))


def level_charts(sides: Sequence[Side], names: Sequence[str]) -> list[Part]:
    """Output tok/s and TTFT/TPOT percentiles per concurrency (a level's mean over repeats);
    bars when there is one level, lines over the levels otherwise."""
    cs = sorted({c for s in sides for c in s.concurrencies()})
    if not cs:
        return []
    cats = tuple(f"C={c}" for c in cs)
    out: list[Part] = []

    def pts(side: Side, key: str) -> tuple[tuple[float, float], ...]:
        return tuple((float(i), v) for i, c in enumerate(cs) if (v := _mean_at(side, c, key)) is not None)

    tput = tuple(Series(n, pts(s, "output_throughput"), color=j) for j, (s, n) in enumerate(zip(sides, names)))
    if len(cs) == 1:
        out.append(BarChart(f"Output tok/s ({cats[0]})", "output tok/s", cats, tput))
        for metric, what in (("ttft", "TTFT"), ("tpot", "TPOT")):
            series = []
            for j, (side, name) in enumerate(zip(sides, names)):
                p = tuple(
                    (float(i), v)
                    for i, (_, k) in enumerate(PERCENTILES)
                    if (v := _mean_at(side, cs[0], f"{k}_{metric}_ms")) is not None
                )
                series.append(Series(name, p, color=j))
            out.append(
                BarChart(f"{what} percentiles ({cats[0]})", "ms", tuple(p for p, _ in PERCENTILES), tuple(series))
            )
        return out
    out.append(LineChart("Output tok/s by concurrency", "concurrency", "output tok/s", tput, cats))
    for metric, what in (("ttft", "TTFT"), ("tpot", "TPOT")):
        series = [
            Series(f"{name} {p}", pts(side, f"{k}_{metric}_ms"), color=j, dash=d)
            for j, (side, name) in enumerate(zip(sides, names))
            for d, (p, k) in enumerate(PERCENTILES)
        ]
        out.append(LineChart(f"{what} by concurrency", "concurrency", "ms", tuple(s for s in series if s.points), cats))
    return out


def level_series(run_id: str | None) -> tuple[tuple[tuple[float, float], ...], str]:
    """A level's output tok/s second by second and where it came from: the client's figure in
    ``timeline.jsonl``, else rebuilt from the per-request samples."""
    if not run_id:
        return (), ""
    try:
        lines = read_timeline(run_dir(run_id))
    except (StoreError, OSError) as e:
        log.warning("report: timeline of %s unreadable: %s", run_id, e)
        lines = []
    pts = []
    for ln in lines:
        sec, tok = ln.get("second"), (ln.get("client") or {}).get("tok_s")
        if isinstance(sec, (int, float)) and isinstance(tok, (int, float)) and not isinstance(tok, bool):
            pts.append((float(sec), float(tok)))
    if pts:
        return tuple(sorted(pts)), "timeline"
    vals = run_series(run_id)
    return tuple((float(i), v) for i, v in enumerate(vals)), "samples" if vals else ""


def timeline_charts(sides: Sequence[Side], names: Sequence[str]) -> list[Part]:
    """Per level: every side's (and repeat's) output tok/s over time on one chart."""
    cs = sorted({c for s in sides for c in s.concurrencies()})
    out: list[Part] = []
    sources: set[str] = set()
    for c in cs[:MAX_TIMELINES]:
        series = []
        for j, (side, name) in enumerate(zip(sides, names)):
            for i, run in enumerate(side.runs):
                lv = run.level(c)
                if lv is None:
                    continue
                pts, src = level_series(lv.run_id)
                sources.add(src)
                label = name + (f" r{i + 1}" if len(side.runs) > 1 else "")
                series.append(Series(label, pts, color=j, dash=i))
        if any(s.points for s in series):
            out.append(
                LineChart(
                    f"Output tok/s over time (C={c})",
                    "seconds since the timed phase began",
                    "output tok/s",
                    tuple(s for s in series if s.points),
                )
            )
    if not out:
        return [Notes(("No per-second record of these levels is stored here.",))]
    how = []
    if "timeline" in sources:
        how.append("the client's tokens per second as the host-side timeline recorded them (timeline.jsonl)")
    if "samples" in sources:
        how.append("rebuilt from the per-request token timestamps (samples.jsonl), 1-s bins")
    if len(cs) > MAX_TIMELINES:
        how.append(f"the first {MAX_TIMELINES} of {len(cs)} levels are drawn")
    return [*out, Notes(tuple(w[0].upper() + w[1:] + "." for w in how))]


def validity_notes(sides: Sequence[Side], names: Sequence[str]) -> list[Part]:
    items = []
    warn = False
    for side, name in zip(sides, names):
        for i, lv in _levels(side):
            where = f"{name}{f' r{i + 1}' if len(side.runs) > 1 else ''} C={lv.concurrency}"
            v = lv.summary.get("validity")
            if not isinstance(v, list):
                items.append(f"{where}: not checked (no host-side timeline for this result)")
            elif not v:
                items.append(f"{where}: valid (no finding)")
            else:
                warn = True
                items += [
                    f"{where}: {f.get('rule')}: {f.get('evidence')}"
                    for f in v
                    if isinstance(f, Mapping)  # evidence is host text: escaped by the renderers
                ]
    return [Notes(tuple(items), tone="warn" if warn else "ok")] if items else []


def result_notes(side: Side) -> list[str]:
    """What a reader of one result must know: partial, failed requests, a saturated client."""
    out = []
    for _, lv in _levels(side):
        s, c = lv.summary, lv.concurrency
        if s.get("partial"):
            out.append(f"C={c}: partial: the level did not finish; its summary was rebuilt from its samples")
        failed = summary_number(s, "failed") or 0
        if failed:
            out.append(f"C={c}: {failed:.0f} of {failed + (summary_number(s, 'completed') or 0):.0f} requests failed")
        client = _map(s.get("client"))
        if s.get("client_bound"):
            out.append(
                f"C={c}: the benchmark client was saturated ({client.get('client_bound_reason') or 'no reason'})"
            )
        if s.get("machine_busy"):
            out.append(f"C={c}: the client's machine was busy ({client.get('machine_busy_reason') or 'no reason'})")
        if client.get("where") == "local-via-ssh":
            out.append(f"C={c}: measured through an SSH tunnel: the link's latency is in these numbers")
    return out


# ---------------------------------------------------------------------- commands, environment


def command_lines(side: Side, meta: Mapping[str, Any]) -> list[str]:
    """The profile and the engine's command line (secrets redacted), as run."""
    out = [f"# profile: {side.profile or '(none)'}"]
    argv = redact_argv(side.argv)
    env = redact_env(dict(side.env))
    if argv:
        words = [f"{k}={v}" for k, v in env.items()]
        out.append(shlex.join((["env", *words] if words else []) + argv))
    else:
        out.append("# the engine's command line was not recorded")
    server = _map(meta.get("server"))
    if server.get("server_log"):
        out.append(f"# server log: {server['server_log']}")
    return out


#: benchmark parameters shown, in this order (the rest of meta.params is detail)
PARAMS = (
    "endpoint",
    "num_prompts",
    "input_len",
    "output_len",
    "max_concurrency",
    "request_rate",
    "warmup",
    "ignore_eos",
    "temperature",
    "seed",
    "dataset",
    "tokenizer",
    "percentiles",
)


def cell_text(v: Any) -> str:
    if v is None:
        return "N/A"
    if isinstance(v, (list, tuple)):
        return ", ".join(cell_text(x) for x in v)
    if isinstance(v, Mapping):
        return ", ".join(f"{k}={cell_text(x)}" for k, x in v.items()) or "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def params_table(metas: Sequence[Mapping[str, Any]], names: Sequence[str]) -> Table:
    ps = [_map(m.get("params")) for m in metas]
    rows = [(k, *(cell_text(p.get(k)) for p in ps)) for k in PARAMS if any(k in p for p in ps)]
    return Table(("Benchmark parameter", *names), tuple(rows), title="Benchmark parameters")


def _gpus(meta: Mapping[str, Any]) -> str:
    g = meta.get("gpus")
    if isinstance(g, list) and g:
        return "; ".join(str(x) for x in g)
    return "not recorded"


def _engine(side: Side, meta: Mapping[str, Any]) -> str:
    e = meta.get("engine")
    if isinstance(e, Mapping):
        name, ver = e.get("engine") or side.engine, e.get("version")
        return f"{name or '?'} {ver or '(version unknown)'}"
    return side.engine or "unknown"


def _workload(meta: Mapping[str, Any]) -> tuple[str, str]:
    if not meta:
        return "not recorded", "-"
    wl = workload_of(meta)
    return describe({**wl, "sha256": None}), str(wl.get("sha256") or "-")


ENV_ROWS: tuple[tuple[str, Callable[[Side, Mapping[str, Any]], str]], ...] = (
    ("Host", lambda s, m: str(m.get("target") or "not recorded")),
    (
        "Client",
        lambda s, m: (
            f"{(m.get('client') or {}).get('hostname') or '?'} ({(m.get('client') or {}).get('where') or 'local'})"
            if isinstance(m.get("client"), Mapping)
            else "not recorded"
        ),
    ),
    ("GPUs", lambda s, m: _gpus(m)),
    ("Engine", _engine),
    ("Model", lambda s, m: s.model or str(m.get("model") or "unknown")),
    ("Workload", lambda s, m: _workload(m)[0]),
    ("Workload sha256", lambda s, m: _workload(m)[1]),
    ("Started", lambda s, m: str(m.get("date") or "not recorded")),
    ("Startup (s)", lambda s, m: ", ".join(num_text(r.startup_s, ".1f") for r in s.runs) or "N/A"),
    ("Result ids", lambda s, m: ", ".join(str(lv.run_id) for _, lv in _levels(s) if lv.run_id) or "-"),
)


def environment_table(sides: Sequence[Side], metas: Sequence[Mapping[str, Any]], names: Sequence[str]) -> Table:
    rows = tuple((what, *(fn(s, m) for s, m in zip(sides, metas))) for what, fn in ENV_ROWS)
    return Table(("", *names), rows)


def common_sections(sides: Sequence[Side], names: Sequence[str], *, results_title: str = "Results") -> list[Section]:
    metas = [_first_meta(s) for s in sides]
    commands: list[Part] = []
    for side, name, meta in zip(sides, names, metas):
        commands.append(Code(tuple(command_lines(side, meta)), title=name if len(sides) > 1 else ""))
    commands.append(params_table(metas, names))
    return [
        Section(results_title, (level_table(sides, names), *level_charts(sides, names))),
        Section("Throughput over time", tuple(timeline_charts(sides, names))),
        Section("Validity", tuple(validity_notes(sides, names)) or (Notes(("No levels.",)),)),
        Section("Commands", tuple(commands)),
        Section("Environment", (environment_table(sides, metas, names),)),
    ]


# ---------------------------------------------------------------------- the reports


def result_report(side: Side, ref: str) -> Report:
    """A benchmark result (one run, or a sweep's runs) as a report."""
    name = side.profile or "result"
    meta = _first_meta(side)
    levels = [lv for _, lv in _levels(side)]
    parts = []
    for lv in levels:
        s = lv.summary
        parts.append(
            f"C={lv.concurrency}: {num_text(summary_number(s, 'output_throughput'), ',.0f')} output tok/s, "
            f"TTFT p50 {num_text(summary_number(s, 'median_ttft_ms'), ',.0f')} ms, "
            f"TPOT p50 {num_text(summary_number(s, 'median_tpot_ms'), ',.1f')} ms"
        )
    headline = "; ".join(parts[:4]) + (f"; … {len(parts) - 4} more levels" if len(parts) > 4 else "")
    sections = common_sections([side], [name])
    notes = result_notes(side)
    if notes:
        sections.insert(0, Section("Warnings", (Notes(tuple(notes), tone="warn"),)))
    facts = (
        ("Result", ref),
        ("Profile", side.profile or "-"),
        ("Model", side.model or "unknown"),
        ("Engine", _engine(side, meta)),
        ("Host", str(meta.get("target") or "not recorded")),
    )
    return Report("result", ref, f"Benchmark {ref}", headline, tuple(sections), now_text(), facts)


def verdict_parts(cmp: Comparison, extra_warnings: Iterable[str] = ()) -> list[Part]:
    rows = tuple((r.label, fmt_value(r.a, r.unit), fmt_value(r.b, r.unit), fmt_delta(r), r.verdict) for r in cmp.rows)
    out: list[Part] = [Table(("Metric", cmp.a, cmp.b, "\u0394", "Verdict"), rows, numeric=(1, 2, 3))]
    out.append(Notes((cmp.noise_method,)))
    if cmp.config_diff:
        out.append(Notes(tuple(c.text for c in cmp.config_diff), title="Configuration difference (A \u2192 B)"))
    else:
        out.append(Notes(("Configuration difference: none (same flags and env).",)))
    warnings = [*cmp.warnings, *extra_warnings]
    if warnings:
        out.append(Notes(tuple(warnings), tone="warn", title="Warnings"))
    return out


def ab_report(entry: Mapping[str, Any], a: Side, b: Side, cmp: Comparison) -> Report:
    """An A/B from the journal, its sides and their comparison, as a report."""
    ab_id = str(entry.get("id") or "")
    extra = [str(w) for w in entry.get("warnings") or () if w]
    if entry.get("error"):
        extra.insert(0, f"stopped: {entry['error']}")
    names = [a.name, b.name]
    sections = [Section("Verdict", tuple(verdict_parts(cmp, extra))), *common_sections([a, b], names)]
    facts = (
        ("A/B", ab_id),
        ("Status", str(entry.get("status") or "?")),
        ("Host", str(entry.get("host") or "?")),
        ("Plan", str(entry.get("plan") or "?")),
        ("Repeats", f"{cmp.repeats[0]} + {cmp.repeats[1]}"),
        ("Started", str(entry.get("started") or entry.get("time") or "?")),
    )
    title = f"A/B {ab_id}: {a.profile or 'A'} vs {b.profile or 'B'}"
    return Report("ab", ab_id, title, cmp.headline, tuple(sections), now_text(), facts)


__all__ = [
    "ab_report",
    "cell_text",
    "common_sections",
    "environment_table",
    "level_charts",
    "level_table",
    "now_text",
    "num_text",
    "result_report",
    "timeline_charts",
]
