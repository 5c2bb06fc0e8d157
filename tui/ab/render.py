"""Render a :class:`~tunedeck.ab.compare.Comparison` as a text table, Markdown, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from tunedeck.ab.compare import Comparison, Row, Stat
from tunedeck.fmt import text_table
from tunedeck.util.records import pick


def fmt_value(stat: Stat | None, unit: str) -> str:
    if stat is None:
        return "N/A"
    digits = 0 if unit == "" else (1 if unit in ("tok/s", "%", "s") or abs(stat.mean) >= 100 else 2)
    s = f"{stat.mean:,.{digits}f}"
    if stat.spread is not None:
        s += f" \u00b1 {stat.spread:,.{digits}f}"
    return s


def fmt_delta(row: Row) -> str:
    if row.delta_pct is None or row.outcome == "same":
        return ""
    from tunedeck.ab.compare import fmt_pct

    return fmt_pct(row.delta_pct)


def _cells(cmp: Comparison) -> tuple[list[str], list[list[str]]]:
    head = ["Metric", cmp.a, cmp.b, "\u0394", "Verdict"]
    body = [[r.label, fmt_value(r.a, r.unit), fmt_value(r.b, r.unit), fmt_delta(r), r.verdict] for r in cmp.rows]
    return head, body


def to_text(cmp: Comparison) -> str:
    head, body = _cells(cmp)
    out = [cmp.headline, "", *text_table(head, body, right=(1, 2, 3), rule=True)]
    out.append("")
    out.append(cmp.noise_method)
    if cmp.config_diff:
        out.append("")
        out.append("Configuration difference (A \u2192 B):")
        out += [f"  {c.text}" for c in cmp.config_diff]
    else:
        out += ["", "Configuration difference: none (same flags and env)"]
    if cmp.warnings:
        out.append("")
        out += [f"warning: {w}" for w in cmp.warnings]
    return "\n".join(out) + "\n"


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def to_markdown(cmp: Comparison, *, title: str | None = None) -> str:
    head, body = _cells(cmp)
    out = []
    if title:
        out += [f"## {title}", ""]
    out += [f"**{_md_escape(cmp.headline)}**", ""]
    out.append("| " + " | ".join(_md_escape(h) for h in head) + " |")
    out.append("|" + "|".join(["---", "---:", "---:", "---:", "---"]) + "|")
    for r in body:
        out.append("| " + " | ".join(_md_escape(c) for c in r) + " |")
    out += ["", f"_{cmp.noise_method}_", ""]
    if cmp.config_diff:
        out.append("Configuration difference (A \u2192 B):")
        out.append("")
        for c in cmp.config_diff:
            a = "" if c.a is None else ("(switch)" if c.a == "" else f"`{c.a}`")
            b = "" if c.b is None else ("(switch)" if c.b == "" else f"`{c.b}`")
            out.append(f"- {c.kind} `{c.name}`: {a or '(absent)'} \u2192 {b or '(absent)'}")
        out.append("")
    if cmp.warnings:
        out.append("Warnings:")
        out.append("")
        out += [f"- {_md_escape(w)}" for w in cmp.warnings]
        out.append("")
    return "\n".join(out)


CSV_FIELDS = [
    "key",
    "metric",
    "unit",
    "better",
    "concurrency",
    "a_mean",
    "a_spread",
    "a_n",
    "b_mean",
    "b_spread",
    "b_n",
    "delta_pct",
    "noise_pct",
    "outcome",
    "verdict",
]


def to_csv(cmp: Comparison) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for r in cmp.rows:
        w.writerow(
            [
                r.key,
                r.label,
                r.unit,
                r.better,
                "" if r.concurrency is None else r.concurrency,
                _n(r.a and r.a.mean),
                _n(r.a and r.a.spread),
                r.a.n if r.a else 0,
                _n(r.b and r.b.mean),
                _n(r.b and r.b.spread),
                r.b.n if r.b else 0,
                _n(r.delta_pct),
                _n(r.noise_pct),
                r.outcome,
                r.verdict,
            ]
        )
    return buf.getvalue()


def _n(v: Any) -> str:
    if v is None:
        return ""
    return f"{float(v):.6g}"


def _stat(s: Stat | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"mean": s.mean, "spread": s.spread, "n": s.n, "values": list(s.values)}


def to_dict(cmp: Comparison) -> dict[str, Any]:
    return {
        **pick(cmp, "a", "b", "a_profile", "b_profile", "headline", "winner"),
        "repeats": list(cmp.repeats),
        "noise_method": cmp.noise_method,
        "rows": [
            {
                "key": r.key,
                "metric": r.label,
                **pick(r, "unit", "better", "concurrency", "group"),
                "a": _stat(r.a),
                "b": _stat(r.b),
                **pick(r, "delta_pct", "noise_pct", "outcome", "verdict"),
            }
            for r in cmp.rows
        ],
        "config_diff": [{"kind": c.kind, "name": c.name, "a": c.a, "b": c.b} for c in cmp.config_diff],
        "warnings": list(cmp.warnings),
    }


def to_json(cmp: Comparison) -> str:
    return json.dumps(to_dict(cmp), indent=2, ensure_ascii=False) + "\n"


def render(cmp: Comparison, fmt: str) -> str:
    fmt = fmt.lower()
    if fmt in ("text", "txt"):
        return to_text(cmp)
    if fmt in ("md", "markdown"):
        return to_markdown(cmp)
    if fmt == "csv":
        return to_csv(cmp)
    if fmt == "json":
        return to_json(cmp)
    raise ValueError(f"unknown format {fmt!r} (text, md, csv, json)")


__all__ = ["fmt_value", "render", "to_csv", "to_dict", "to_json", "to_markdown", "to_text"]
