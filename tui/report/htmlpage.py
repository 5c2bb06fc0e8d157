"""A :class:`~tunedeck.report.parts.Report` as one self-contained HTML page.

Inline CSS, charts as inline SVG, no script, no fonts, no images, no links out: the page's
Content-Security-Policy forbids loading anything, so a page that tried would say so in the
browser's console rather than reach the network. Every string is escaped
(:func:`tunedeck.report.svg.esc`). Tables scroll sideways in their own box and commands wrap, so a
phone's width never scrolls the page; ``@media print`` keeps charts and tables whole.
"""

from __future__ import annotations

from tunedeck import __version__
from tunedeck.report.parts import BarChart, Code, LineChart, Notes, Part, Report, ScatterChart, Table
from tunedeck.report.svg import bar_svg, esc, line_svg, scatter_svg, swatch_svg

CSP = "default-src 'none'; style-src 'unsafe-inline'"

CSS = """
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2125;background:#fff}
main{max-width:62rem;margin:0 auto;padding:1rem}
h1{font-size:1.5rem;margin:.2rem 0 .4rem;overflow-wrap:anywhere}
h2{font-size:1.2rem;margin:1.6rem 0 .5rem;border-bottom:1px solid #d0d4d9;padding-bottom:.2rem}
h3{font-size:1rem;margin:1rem 0 .3rem}
.headline{font-size:1.05rem;font-weight:600;margin:.4rem 0 .8rem;overflow-wrap:anywhere}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.1rem .8rem;margin:0}
dl.facts dt{color:#555}
dl.facts dd{margin:0;overflow-wrap:anywhere;min-width:0}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.3rem 0 .8rem;font-size:.9rem}
th,td{border:1px solid #d0d4d9;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f1f3f5}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
pre{background:#f6f8fa;border:1px solid #d0d4d9;padding:.5rem;white-space:pre-wrap;overflow-wrap:anywhere;
font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;margin:.3rem 0 .8rem}
figure{margin:.3rem 0 1rem}
svg.chart{width:100%;height:auto;display:block;max-width:44rem}
figcaption ul{list-style:none;margin:.2rem 0 0;padding:0;display:flex;flex-wrap:wrap;gap:.2rem 1rem;font-size:.9rem}
figcaption li{display:flex;align-items:center;gap:.3rem;overflow-wrap:anywhere;min-width:0}
svg.swatch{flex:none}
ul.notes{padding-left:1.2rem;margin:.3rem 0 .8rem}
ul.notes li{overflow-wrap:anywhere}
ul.warn li::marker{color:#c92a2a}
footer{margin-top:2rem;color:#666;font-size:.85rem}
@media (max-width:480px){main{padding:.6rem}body{font-size:14px}th,td{padding:.2rem .3rem}}
@media print{body{font-size:10pt}main{max-width:none;padding:0}.scroll{overflow:visible}
figure,table,pre,dl.facts{break-inside:avoid}h2,h3{break-after:avoid}
*{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
"""


def _table(t: Table) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in t.headers)
    body = []
    for row in t.rows:
        cells = "".join(
            f'<td class="num">{esc(c)}</td>' if i in t.numeric else f"<td>{esc(c)}</td>" for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    title = f"<h3>{esc(t.title)}</h3>\n" if t.title else ""
    return (
        f'{title}<div class="scroll"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n'
        + "\n".join(body)
        + ("\n</tbody></table></div>")
    )


def _chart(c: LineChart | BarChart) -> str:
    bar = isinstance(c, BarChart)
    svg = bar_svg(c) if isinstance(c, BarChart) else line_svg(c)
    legend = "".join(f"<li>{swatch_svg(s.color, s.dash, bar=bar)}<span>{esc(s.name)}</span></li>" for s in c.series)
    return f"<h3>{esc(c.title)}</h3>\n<figure>\n{svg}\n<figcaption><ul>{legend}</ul></figcaption>\n</figure>"


def _scatter(c: ScatterChart) -> str:
    """The chart, and a legend naming every point (the labels on the chart are cut short)."""
    items = [
        f"<li>{swatch_svg(0, 0) if p.frontier else swatch_svg(5, 0, ring=True)}<span>{esc(p.name)}: "
        f"{esc(f'{p.x:,.1f}')} / {esc(f'{p.y:,.1f}')}{' (frontier)' if p.frontier else ''}</span></li>"
        for p in sorted(c.points, key=lambda p: (not p.frontier, -p.x))
    ]
    return (
        f"<h3>{esc(c.title)}</h3>\n<figure>\n{scatter_svg(c)}\n<figcaption><ul>{''.join(items)}</ul>"
        f"</figcaption>\n</figure>"
    )


def _part(p: Part) -> str:
    if isinstance(p, Table):
        return _table(p)
    if isinstance(p, ScatterChart):
        return _scatter(p)
    if isinstance(p, (LineChart, BarChart)):
        return _chart(p)
    title = f"<h3>{esc(p.title)}</h3>\n" if p.title else ""
    if isinstance(p, Code):
        return f"{title}<pre>" + "\n".join(esc(line) for line in p.lines) + "</pre>"
    assert isinstance(p, Notes)
    items = "".join(f"<li>{esc(i)}</li>" for i in p.items)
    return f'{title}<ul class="notes {esc(p.tone)}">{items}</ul>'


def to_html(report: Report) -> str:
    facts = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in report.facts)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>{esc(report.title)}</title>",
        f"<style>{CSS}</style></head>",
        f'<body><main data-kind="{esc(report.kind)}">',
        f"<header><h1>{esc(report.title)}</h1>",
        f'<p class="headline">{esc(report.headline)}</p>' if report.headline else "",
        f'<dl class="facts">{facts}</dl></header>' if facts else "</header>",
    ]
    for sec in report.sections:
        out.append(f"<section><h2>{esc(sec.title)}</h2>")
        out += [_part(p) for p in sec.parts]
        out.append("</section>")
    gen = f" on {esc(report.generated)}" if report.generated else ""
    out.append(f"<footer>Written by tunedeck {esc(__version__)}{gen}.</footer>")
    out.append("</main></body></html>")
    return "\n".join(x for x in out if x) + "\n"


__all__ = ["CSP", "to_html"]
