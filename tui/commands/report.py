"""``tunedeck report ID --html FILE | --markdown FILE``: a result, an A/B or a campaign, shareable."""

from __future__ import annotations

import argparse
import json
import sys

from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._cli import fail


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        subparsers,
        common,
        "report",
        description="ID is a result id (`tunedeck results list`, or a unique prefix), a sweep id, an A/B id "
        "from the journal (`tunedeck journal`), ABID:A / ABID:B, or a campaign's JSON file. The HTML file is "
        "self-contained (inline CSS and SVG charts, no script, nothing loaded from the network); the Markdown "
        "has the same tables, with the charts summarised in words, for a pull-request comment.",
    )
    p.add_argument("ref", metavar="ID", help="result, sweep or A/B id, or a campaign JSON file")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--html", metavar="FILE", help="write one self-contained HTML page to FILE")
    g.add_argument("--markdown", metavar="FILE", help="write GitHub-flavoured Markdown to FILE ('-': stdout)")
    p.add_argument("--force", action="store_true", help="replace FILE when it exists (default: refuse)")
    p.add_argument("--json", action="store_true", help='print {"path", "kind", "bytes"} of what was written')
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tunedeck.report.load import ReportError, build, render, write

    fmt, dest = ("html", args.html) if args.html else ("markdown", args.markdown)
    if dest == "-" and fmt == "html":
        return fail("report", "--html needs a file name (the page is meant to be opened or attached)", 2)
    if dest == "-" and args.json:
        return fail("report", "--json prints what was written to a file; with --markdown - the report is the output", 2)
    try:
        report = build(args.ref)
    except ReportError as e:
        return fail("report", str(e), 2)
    text = render(report, fmt)
    if dest == "-":
        sys.stdout.write(text)
        return 0
    try:
        n = write(text, dest, force=args.force)
    except ReportError as e:
        return fail("report", str(e))
    if args.json:
        print(json.dumps({"path": dest, "kind": report.kind, "format": fmt, "bytes": n}))
    else:
        print(f"wrote the {report.kind} report {report.id} to {dest} ({n:,} bytes)", file=sys.stderr)
    return 0
