"""``tunedeck compare RUN1 RUN2`` (or ``compare ABID``): the operator's A/B table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tunedeck.ab.compare import Comparison, compare
from tunedeck.ab.render import to_csv, to_json, to_markdown, to_text
from tunedeck.ab.results import RefError, resolve_sides
from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._cli import add_noise_option, fail
from tunedeck.util.files import atomic_write_text


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        subparsers,
        common,
        "compare",
        description="REF is a benchmark run id (or prefix, or its folder), an A/B id from the journal "
        "(alone: compares its A and B), or ABID:A / ABID:B.",
    )
    p.add_argument("refs", nargs="+", metavar="REF", help="RUN1 RUN2, or one A/B id")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--markdown", metavar="FILE", help="also write the comparison as Markdown to FILE ('-': stdout)")
    g.add_argument("--csv", metavar="FILE", help="also write the comparison as CSV to FILE ('-': stdout)")
    add_noise_option(p)
    p.set_defaults(func=run)


def write_export(cmp: Comparison, args: argparse.Namespace) -> int:
    for attr, fn in (("markdown", to_markdown), ("csv", to_csv)):
        dest = getattr(args, attr, None)
        if not dest:
            continue
        text = fn(cmp)
        if dest == "-":
            sys.stdout.write(text)
            continue
        try:
            atomic_write_text(Path(dest), text)
        except OSError as e:
            print(f"tunedeck: cannot write {dest}: {e.strerror or e}", file=sys.stderr)
            return 1
        print(f"wrote {attr} to {dest}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    if len(args.refs) > 2:
        return fail("compare", "give one A/B id or two run ids", 2)
    if not (0 <= args.noise <= 100):
        return fail("compare", "--noise must be between 0 and 100", 2)
    try:
        a, b, _ = resolve_sides(list(args.refs))
    except RefError as e:
        return fail("compare", e, 2)
    cmp = compare(a, b, noise_pct=args.noise)
    if args.json:
        sys.stdout.write(to_json(cmp))
    elif not (args.markdown == "-" or args.csv == "-"):
        sys.stdout.write(to_text(cmp))
    return write_export(cmp, args)
