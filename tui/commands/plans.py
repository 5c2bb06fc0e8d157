"""``tunedeck plans list|show NAME|check FILE``: the A/B benchmark plans."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from tunedeck.ab.plans import PlanError, list_plans, load_plan, parse_plan_file
from tunedeck.bench.workloads import describe as describe_workload
from tunedeck.util.safety import visible

if TYPE_CHECKING:
    from tunedeck.commands import Subparsers


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("plans", parents=[common], help="list, show or check A/B benchmark plans (TOML)")
    sub = p.add_subparsers(dest="plans_cmd", metavar="ACTION")
    jp = argparse.ArgumentParser(add_help=False)
    jp.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    sub.add_parser("list", parents=[jp], help="list the plans (user plans shadow the shipped ones)")
    s = sub.add_parser("show", parents=[jp], help="show a plan's levels")
    s.add_argument("name", help="plan name or path to a .toml file")
    c = sub.add_parser("check", parents=[jp], help="validate a plan file (errors name file, line and key)")
    c.add_argument("file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cmd = args.plans_cmd or "list"
    try:
        if cmd == "list":
            rows = []
            for name, path in list_plans():
                try:
                    pl = parse_plan_file(path)
                    rows.append(
                        {
                            "name": name,
                            "path": str(path),
                            "concurrency": list(pl.concurrencies),
                            "description": pl.description,
                            "error": None,
                        }
                    )
                except PlanError as e:
                    rows.append(
                        {"name": name, "path": str(path), "concurrency": [], "description": "", "error": str(e)}
                    )
            if args.json:
                print(json.dumps(rows, indent=2))
            else:
                for row in rows:
                    cs = ",".join(map(str, row["concurrency"] or ()))
                    print(f"{row['name']:<12} C={cs:<14} {row['error'] or row['description']}")
            return 0
        plan = load_plan(args.name) if cmd == "show" else parse_plan_file(args.file)
    except PlanError as e:
        print(f"tunedeck: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**plan.to_dict(), "warnings": plan.warnings()}, indent=2))
        return 0
    if cmd == "check":
        print(f"{plan.source}: ok ({len(plan.levels)} levels: C={','.join(map(str, plan.concurrencies))})")
    else:
        print(f"{plan.name}: {plan.description}  [{plan.source}]")
        print(
            f"  endpoint={plan.endpoint} ignore_eos={str(plan.ignore_eos).lower()} "
            f"temperature={plan.temperature:g} seed={plan.seed}"
        )
        wl = plan.workload
        print(f"  workload: {describe_workload(wl.to_json())}" + (f"  file={visible(wl.path)}" if wl.path else ""))
        for lv in plan.levels:
            rate = f" rate={lv.request_rate:g}/s" if lv.request_rate else ""
            print(
                f"  {lv.title:<14} C={lv.concurrency:<4} prompts={lv.num_prompts:<5} "
                f"in={lv.input_len} out={lv.output_len} warmup={lv.warmup}{rate}"
            )
    for w in plan.warnings():
        print(f"warning: {w}", file=sys.stderr)
    return 0
