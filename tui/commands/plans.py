"""``tunedeck plans list|show NAME|check FILE``: the A/B benchmark plans."""

from __future__ import annotations

import argparse
import json
import sys

from tunedeck.ab.plans import PlanError, list_plans, load_plan, parse_plan_file
from tunedeck.bench.workloads import describe as describe_workload
from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._cli import json_actions
from tunedeck.fmt import text_table
from tunedeck.util.safety import visible


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(subparsers, common, "plans")
    add = json_actions(p, "plans_cmd")
    add("list", "list the plans (user plans shadow the shipped ones)")
    add("show", "show a plan's levels").add_argument("name", help="plan name or path to a .toml file")
    add("check", "validate a plan file (errors name file, line and key)").add_argument("file")
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
                table = [
                    (r["name"], ",".join(map(str, r["concurrency"] or ())), visible(r["error"] or r["description"]))
                    for r in rows
                ]
                print("\n".join(text_table(("PLAN", "C", "DESCRIPTION"), table)))
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
        levels = [
            (
                visible(lv.title),
                lv.concurrency,
                lv.num_prompts,
                lv.input_len,
                lv.output_len,
                lv.warmup,
                f"{lv.request_rate:g}/s" if lv.request_rate else "-",
            )
            for lv in plan.levels
        ]
        headers = ("LEVEL", "C", "PROMPTS", "IN", "OUT", "WARMUP", "RATE")
        print("\n".join(text_table(headers, levels, indent="  ", right=(1, 2, 3, 4, 5, 6))))
    for w in plan.warnings():
        print(f"warning: {w}", file=sys.stderr)
    return 0
