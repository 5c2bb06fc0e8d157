"""``tunedeck journal [list|export]``: the tuning journal of A/B, launch and benchmark runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tunedeck.ab.journal import KINDS, Journal, export
from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._cli import json_actions
from tunedeck.fmt import text_table
from tunedeck.util.files import atomic_write_text
from tunedeck.util.safety import visible


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(subparsers, common, "journal")
    add = json_actions(p, "journal_cmd")
    ls = add("list", "list journal entries (default)")
    ex = add("export", "export the journal as Markdown, CSV or JSON")
    ex.add_argument("--format", "-f", choices=["md", "csv", "json"], default="md", help="--json is --format json")
    ex.add_argument("--output", "-o", metavar="FILE", help="write to FILE (default: stdout)")
    for action in (ls, ex):
        action.add_argument("--kind", choices=KINDS, help="only this kind")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    j = Journal()
    kind = getattr(args, "kind", None)
    ents = j.entries(kind, include_results=True)
    if args.journal_cmd == "export":
        text = export(ents, "json" if getattr(args, "json", False) else args.format)
        if args.output:
            try:
                atomic_write_text(Path(args.output), text)
            except OSError as e:
                print(f"tunedeck: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
                return 1
            print(f"wrote {len(ents)} entries to {args.output}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0
    if args.json:
        print(json.dumps(ents, indent=2))
        return 0
    if not ents:
        print(f"journal is empty ({j.path})")
        return 0
    rows = [
        (str(ent.get("started", ""))[:19], ent.get("kind"), ent.get("id"), ent.get("status", ""), *_outline(ent))
        for ent in ents
    ]
    print("\n".join(text_table(("STARTED", "KIND", "ID", "STATUS", "WHAT", "RESULT"), rows)))
    return 0


def _outline(ent: dict[str, Any]) -> tuple[str, str]:
    """What a journal entry was about and how it came out, each on one line (made safe to show:
    an error or a diagnosis can carry a host's text)."""
    kind = ent.get("kind")
    if kind == "ab":
        what = f"{(ent.get('a') or {}).get('profile')} vs {(ent.get('b') or {}).get('profile')} plan={ent.get('plan')}"
        res = (ent.get("comparison") or {}).get("headline") or ent.get("error") or ""
    elif kind == "tune":
        what = f"{ent.get('base')} ({len(ent.get('candidates') or [])} candidates) slo={' '.join(ent.get('slo') or [])}"
        closest = (ent.get("closest") or {}).get("name")
        res = (
            f"winner {ent['winner']}"
            if ent.get("winner")
            else ent.get("error") or (f"no candidate met the SLO; closest {closest}" if closest else "")
        )
    elif kind == "bench":
        n = ent.get("numbers") or {}
        what = f"{ent.get('profile')} C={ent.get('concurrency')}"
        t = n.get("output_throughput")
        res = f"{t:.1f} tok/s" if isinstance(t, (int, float)) else ""
    else:
        what = f"{ent.get('profile')}"
        res = (
            f"ready in {ent['startup_s']:.1f} s"
            if ent.get("status") == "ready" and ent.get("startup_s") is not None
            else ent.get("diagnosis") or ""
        )
    return visible(what), visible(res)
