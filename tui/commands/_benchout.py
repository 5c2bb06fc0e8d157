"""What ``tunedeck bench`` prints: a benchmark's events (each level's result for people, JSON
progress lines with ``--progress``), the ``--json`` result, and a refusal in one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, TextIO

from tunedeck.bench.plan import BenchPlan
from tunedeck.util.files import atomic_write_text


def fail(msg: str, code: int = 2) -> int:
    """``msg`` on stderr as ``tunedeck bench``'s; returns the exit status ``code``."""
    print(f"tunedeck bench: {msg}", file=sys.stderr)
    return code


def human(plan: BenchPlan) -> TextIO:
    """Where the lines for people go: stderr when stdout carries JSON (``--progress``, ``--json -``)."""
    return sys.stderr if (plan.progress or plan.json == "-") else sys.stdout


def printer(plan: BenchPlan) -> tuple[Callable[[dict[str, Any]], None], set[Any]]:
    """The printer of a benchmark's events, and the run ids of the levels it has shown."""
    from tunedeck.bench import metrics
    from tunedeck.bench.workloads import workload_of
    from tunedeck.services.benchrun import TUNNEL_NOTE, measured_through_tunnel
    from tunedeck.util.safety import visible

    out = human(plan)
    shown: set[Any] = set()

    def emit(msg: dict[str, Any]) -> None:
        if msg.get("type") == "level_done":
            shown.add(msg["summary"].get("run_id"))
        _show(msg)

    def _show(msg: dict[str, Any]) -> None:
        if plan.progress:
            sys.stdout.write(json.dumps(msg, separators=(",", ":"), allow_nan=False, default=str) + "\n")
            sys.stdout.flush()
        if msg.get("type") == "level_done":
            s = msg["summary"]
            c, r = s.get("max_concurrency"), s.get("request_rate")
            where = f"  ({TUNNEL_NOTE})" if measured_through_tunnel(s) else ""
            wl = visible(workload_of(s)["name"])
            print(f"run {s.get('run_id')}  concurrency={c} request_rate={r} workload={wl}{where}", file=out)
            print(metrics.format_result(s, list(plan.percentiles)), file=out)
            print(metrics.format_extras(s), file=out, flush=True)
        elif msg.get("type") == "waiting" and not plan.progress:
            print(f"waiting for {msg['url']} (up to {msg['timeout']:g} s)...", file=sys.stderr, flush=True)

    return emit, shown


def write_json(plan: BenchPlan, summaries: list[dict[str, Any]]) -> int:
    return write_json_data(plan, summaries[0] if len(summaries) == 1 else summaries)


def write_json_data(plan: BenchPlan, data: Any) -> int:
    """``--json``: ``data`` to stdout or the file it names."""
    if plan.json is None:
        return 0
    text = json.dumps(data, indent=2, default=str) + "\n"
    if plan.json == "-":
        sys.stdout.write(text)
        return 0
    try:
        atomic_write_text(Path(plan.json), text)
    except OSError as e:
        return fail(f"--json {plan.json}: {e.strerror or e}", 1)
    return 0
