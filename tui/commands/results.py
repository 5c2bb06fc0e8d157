"""``tunedeck results``: list, show and export stored benchmark runs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._cli import fail
from tunedeck.fmt import text_table
from tunedeck.util.safety import visible


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(subparsers, common, "results")
    sub = p.add_subparsers(dest="results_cmd", metavar="ACTION")
    sub.required = True
    ls = sub.add_parser("list", help="stored runs, newest last")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=cmd_list)
    sh = sub.add_parser("show", help="a run's summary (rebuilt from samples if missing or partial)")
    sh.add_argument("run", metavar="RUN", help="run id (or a unique prefix)")
    sh.add_argument("--json", action="store_true", help="print the summary JSON")
    sh.add_argument(
        "--timeline", action="store_true", help="the GPUs and the server second by second while it ran (timeline.jsonl)"
    )
    sh.set_defaults(func=cmd_show)
    ex = sub.add_parser("export", help="export a run's per-request records")
    ex.add_argument("run", metavar="RUN")
    ex.add_argument("--csv", metavar="FILE", help="one row per request")
    ex.add_argument("--vllm-json", metavar="FILE", help="vLLM's result layout (summary + per-request arrays)")
    ex.add_argument("--json", action="store_true", help="print what was written as JSON")
    ex.set_defaults(func=cmd_export)


def _resolve(run: str) -> str:
    from tunedeck.bench.store import StoreError, list_runs, run_dir

    run_dir(run) if run else None  # validates the characters
    ids = [r.run_id for r in list_runs()]
    if run in ids:
        return run
    hits = [i for i in ids if i.startswith(run)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise StoreError(f"run {run!r}: not found (see `tunedeck results list`)")
    raise StoreError(f"run {run!r}: ambiguous prefix ({', '.join(hits[:5])}...)")


def cmd_list(args: argparse.Namespace) -> int:
    from tunedeck.bench.store import list_runs
    from tunedeck.services.benchrun import measured_through_tunnel, where_label
    from tunedeck.services.jobs import origin

    rows = []
    for r in list_runs():
        s = r.summary or {}
        p = r.meta.get("params") or {}
        src = origin(r.path)
        if r.live:
            status = "running"
        elif src is not None and not r.summary:
            status = "on-host"  # a host-side run not finished when last mirrored
        else:
            status = "partial" if r.partial else "done"
        rows.append(
            {
                "run_id": r.run_id,
                "date": r.meta.get("date"),
                "model": r.meta.get("model"),
                "target": r.meta.get("target"),
                "profile": r.meta.get("profile"),
                "concurrency": p.get("max_concurrency"),
                "request_rate": p.get("request_rate"),
                "completed": s.get("completed"),
                "failed": s.get("failed"),
                "output_throughput": s.get("output_throughput"),
                "status": status,
                "sweep_id": r.meta.get("sweep_id"),
                "client_where": (r.meta.get("client") or {}).get("where"),
                "deployment": (r.meta.get("deployment") or {}).get("id"),
                "measured_through_tunnel": measured_through_tunnel(r.meta),
                "host_job": src.get("job_id") if src else None,
            }
        )
        rows[-1]["where"] = where_label(r.meta)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no benchmark runs yet (run `tunedeck bench ...`)")
        return 0
    table = []
    for row in rows:
        tput = row["output_throughput"]
        table.append(
            (
                row["run_id"],
                row["status"],
                _cell(row["target"], 18),
                _cell(row["profile"], 16),
                row["where"],
                _cell(row["model"], 24),
                row["concurrency"] or "-",
                row["request_rate"],
                "?" if row["completed"] is None else row["completed"],
                "?" if row["failed"] is None else row["failed"],
                "?" if tput is None else f"{tput:.1f}",
            )
        )
    headers = ("RUN", "STATUS", "HOST", "PROFILE", "CLIENT", "MODEL", "C", "RATE", "OK", "FAIL", "OUT tok/s")
    for line in text_table(headers, table, right=(6, 7, 8, 9, 10)):
        print(line)
    if any(r["measured_through_tunnel"] for r in rows):
        print("CLIENT tunnel: measured through an SSH tunnel (the link is in the numbers, not the server's truth)")
    if any(r["status"] == "on-host" for r in rows):
        print("STATUS on-host: still running on its host when last mirrored (`tunedeck bench --attach JOB`)")
    return 0


def _cell(value: object, width: int) -> str:
    """A table cell: ``-`` when unknown, cut with ``…`` when too wide (host text stays plain)."""
    text = visible(str(value)) if value else "-"
    return text if len(text) <= width else text[: width - 1] + "…"


def cmd_show(args: argparse.Namespace) -> int:
    from tunedeck.bench import metrics
    from tunedeck.bench.store import StoreError, summary_for

    try:
        run = _resolve(args.run)
        s = summary_for(run)
    except StoreError as e:
        return fail("results", str(e))
    if getattr(args, "timeline", False):
        return _show_timeline(run, as_json=args.json)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    from tunedeck.services.benchrun import TUNNEL_NOTE, measured_through_tunnel, where_label

    print(
        f"run {run}  model={s.get('model_id')}  concurrency={s.get('max_concurrency')} "
        f"request_rate={s.get('request_rate')}  client={where_label(s)}"
    )
    dep = s.get("deployment")
    if isinstance(dep, dict):
        nodes = dep.get("nodes") or []
        print(
            f"deployment {dep.get('id')} ({dep.get('profile')}): {len(nodes)} nodes, the client ran on {dep.get('head')}"
        )
    if measured_through_tunnel(s):
        print(f"note: {TUNNEL_NOTE}; the link's latency and buffering are in these numbers")
    print(metrics.format_result(s, (s.get("params") or {}).get("percentiles") or metrics.DEFAULT_PERCENTILES))
    print(metrics.format_extras(s))
    if not isinstance(s.get("validity"), list):
        print("validity: not checked (no host-side timeline for this result)")
    return 0


def _show_timeline(run: str, *, as_json: bool) -> int:
    from tunedeck.bench.store import run_dir
    from tunedeck.hostside.timeline import TIMELINE, format_timeline, read_timeline

    lines = read_timeline(run_dir(run))
    if not lines:
        return fail("results", f"run {run}: no {TIMELINE} (recorded for benchmarks run by this version on a host)")
    if as_json:
        print(json.dumps(lines, indent=1))
    else:
        print(format_timeline(lines))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from tunedeck.bench.store import StoreError, export_csv, export_vllm_json

    if not args.csv and not args.vllm_json:
        return fail("results", "export: give --csv FILE and/or --vllm-json FILE", 2)
    out: dict[str, Any] = {}
    try:
        run = _resolve(args.run)
        if args.csv:
            out["csv"] = {"path": args.csv, "rows": export_csv(run, args.csv)}
        if args.vllm_json:
            export_vllm_json(run, args.vllm_json)
            out["vllm_json"] = {"path": args.vllm_json}
    except StoreError as e:
        return fail("results", str(e))
    except OSError as e:
        return fail("results", f"export: {e.filename or ''}: {e.strerror or e}")
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for v in out.values():
            print(f"wrote {v['path']}" + (f" ({v['rows']} rows)" if "rows" in v else ""))
    return 0
