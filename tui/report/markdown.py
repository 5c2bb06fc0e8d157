"""A :class:`~tunedeck.report.parts.Report` as GitHub-flavoured Markdown, for a pull-request comment.

The same sections as the HTML page; a chart becomes a short text summary of its series (no
image, no link). Text is escaped so that nothing of host origin becomes markup, HTML, a
mention, an issue reference or an autolink: controls are written as visible escapes
(``\\x1b``), Markdown's punctuation is backslash-escaped, and commands sit in code fences
longer than any run of backticks inside them.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from tunedeck.report.parts import BarChart, Code, LineChart, Notes, Part, Report, ScatterChart, Table
from tunedeck.util.safety import visible

#: punctuation that is markup anywhere (``$``: GitHub's maths, ``@``: a mention, ``#``: an issue),
#: the ``:`` of ``scheme://`` and the ``.`` of ``www.`` (autolinks), and a line's list marker
_SPECIAL_RE = re.compile(r"[\\`*_\[\]<>#|~!&@$]|:(?=/)|(?<=[wW]{3})\.|^[-+=](?=\s|$|=)")
_LEAD_NUMBER_RE = re.compile(r"^(\d+)([.)])(?=\s|$)")


def md_text(text: object) -> str:
    """One line of text for Markdown: shown as written, never read as markup or a link."""
    s = _SPECIAL_RE.sub(lambda m: "\\" + m.group(), visible(text))
    return _LEAD_NUMBER_RE.sub(r"\1\\\2", s)


def fence(lines: Sequence[str]) -> list[str]:
    """``lines`` in a code fence longer than any run of backticks they hold."""
    body = [visible(x) for x in lines]
    longest = max((len(r) for x in body for r in re.findall(r"`+", x)), default=0)
    f = "`" * max(3, longest + 1)
    return [f + "text", *body, f]


def fmt_num(v: float) -> str:
    """A chart value in a summary: three significant figures or so, thousands separated."""
    a = abs(v)
    return f"{v:,.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}"


def chart_lines(c: LineChart | BarChart) -> list[str]:
    """What a chart shows, as one sentence per series."""
    out = []
    for s in c.series:
        if not s.points:
            continue
        if c.categories:
            vals = ", ".join(
                f"{c.categories[int(x)]} {fmt_num(y)}" for x, y in s.points if 0 <= int(x) < len(c.categories)
            )
            out.append(f"{s.name}: {vals}")
        else:
            ys = [y for _, y in s.points]
            span = max(x for x, _ in s.points) - min(x for x, _ in s.points)
            out.append(
                f"{s.name}: {len(ys)} points over {fmt_num(span)} s; mean {fmt_num(sum(ys) / len(ys))}, "
                f"min {fmt_num(min(ys))}, max {fmt_num(max(ys))}"
            )
    return out


def scatter_lines(c: ScatterChart) -> list[str]:
    """A scatter chart in words: the frontier's points in x order, then the others."""

    def pt(p: Any) -> str:
        return f"{p.name} ({fmt_num(p.x)} {c.x_label}, {fmt_num(p.y)} {c.y_label})"

    front = sorted((p for p in c.points if p.frontier), key=lambda p: p.x)
    rest = sorted((p for p in c.points if not p.frontier), key=lambda p: -p.x)
    out = [f"frontier: {'; '.join(pt(p) for p in front)}"] if front else []
    if rest:
        out.append(f"not on the frontier: {'; '.join(pt(p) for p in rest)}")
    return out or ["no points"]


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(md_text(c) or " " for c in cells) + " |"


def _table(t: Table) -> list[str]:
    out = [f"**{md_text(t.title)}**", ""] if t.title else []
    out.append(_row(t.headers))
    out.append("|" + "|".join("---:" if i in t.numeric else "---" for i in range(len(t.headers))) + "|")
    out += [_row(r) for r in t.rows]
    return out


def _part(p: Part) -> list[str]:
    if isinstance(p, Table):
        return _table(p)
    title = [f"**{md_text(p.title)}**", ""] if p.title else []
    if isinstance(p, ScatterChart):
        return [f"**Chart: {md_text(p.title)}**", ""] + [f"- {md_text(x)}" for x in scatter_lines(p)]
    if isinstance(p, (LineChart, BarChart)):
        unit = f" ({md_text(p.y_label)})" if p.y_label else ""
        return [f"**Chart: {md_text(p.title)}**{unit}", ""] + [f"- {md_text(x)}" for x in chart_lines(p)]
    if isinstance(p, Code):
        return title + fence(p.lines)
    assert isinstance(p, Notes)
    mark = "\u26a0\ufe0f " if p.tone == "warn" else ""
    return title + [f"- {mark}{md_text(i)}" for i in p.items]


def to_markdown(report: Report) -> str:
    out = [f"# {md_text(report.title)}", ""]
    if report.headline:
        out += [f"**{md_text(report.headline)}**", ""]
    if report.facts:
        out += [_row(("", "")), "|---|---|", *(_row(kv) for kv in report.facts), ""]
    for sec in report.sections:
        out += [f"## {md_text(sec.title)}", ""]
        for p in sec.parts:
            out += _part(p)
            out.append("")
    gen = f" on {md_text(report.generated)}" if report.generated else ""
    out.append(f"_Written by tunedeck{gen}._")
    return "\n".join(out) + "\n"


__all__ = ["chart_lines", "fence", "md_text", "to_markdown"]
