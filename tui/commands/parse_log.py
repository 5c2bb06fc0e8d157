"""``tunedeck parse-log FILE``: the startup/log parser the tracker uses, on a file."""

from __future__ import annotations

import argparse
import json
import sys

from tunedeck.commands import Subparsers, add_command
from tunedeck.logparse import (
    ENGINES,
    ErrorEvent,
    FactEvent,
    LogEvent,
    LogParser,
    PhaseEvent,
    StatEvent,
    event_to_json,
)
from tunedeck.model import jsonable
from tunedeck.util.safety import terminal_json, visible

#: exit statuses (README "parse-log"): the log's verdict, so scripts can branch on it
EXIT_READY, EXIT_FAILED, EXIT_UNREADABLE, EXIT_STARTING = 0, 1, 2, 3


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        subparsers,
        common,
        "parse-log",
        description="Parse an SGLang or vLLM server log and print the events (phase changes with "
        "progress 0-1, facts, fatal errors with their kind) and a final summary. Line numbers are the "
        "file's physical lines (less +N lands on them); N.S is segment S of a line joined by \\r redraws.",
        epilog="exit status: 0 ready, 1 failed, 2 unreadable file (cannot be read, binary, or text "
        "without a BOM in an encoding other than UTF-8) or bad usage, 3 still starting or unknown. When the "
        "log holds several starts, the latest one decides. A BOM decides the encoding (UTF-8, UTF-16, "
        "UTF-32). Failure kinds and their advice: docs/log-diagnosis.md.",
    )
    p.add_argument("file", metavar="FILE", help="log file ('-' reads standard input)")
    p.add_argument("--engine", choices=ENGINES, help="engine that wrote the log (default: detected)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--stats", action="store_true", help="also print runtime stat lines (Decode batch …)")
    p.set_defaults(func=run)


def _summary(st) -> dict[str, object]:  # type: ignore[no-untyped-def]
    f = st.failure
    return {
        "event": "summary",
        "engine": st.engine,
        "status": st.status,
        "phase": st.phase,
        "progress": st.phase_progress(),
        "describe": st.describe(),
        "weights": list(st.weights) if st.weights else None,
        "weight_bars": [list(b) for b in st.weight_bars],
        "kv_tokens": st.kv_tokens,
        "graph_bars": [list(b) for b in st.graph_bars],
        "graph_done": st.graph_done,
        "ready_line": st.ready_line,
        "port": st.port,
        "unreadable": st.unreadable,
        "failure": None
        if f is None
        else {
            "kind": f.kind,
            "cause": f.cause,
            "line": f.line,
            "line_no": f.line_no,
            "segment": f.segment,
            "time": f.time,
            "wrapper": f.wrapper,
            "advice": f.advice,
        },
        "facts": jsonable(st.facts),
        "lines": st.lines,
        "attempt": st.attempt,
        "attempt_line": st.attempt_line,
    }


def _where(ev) -> str:  # type: ignore[no-untyped-def]
    return f"line {ev.line_no}" + (f".{ev.segment}" if ev.segment else "")


def _text(ev) -> str | None:  # type: ignore[no-untyped-def]
    t = f"[{ev.time}] " if ev.time else ""
    if isinstance(ev, PhaseEvent):
        prog = ""
        if ev.total is not None:
            prog = f" {ev.n}/{ev.total}"
        if ev.progress is not None:
            prog += f" {ev.progress * 100:.0f}%"
        lab = f" ({ev.label})" if ev.label and ev.label != "weights" else ""
        done = " done" if ev.done else ""
        return visible(f"{t}{ev.phase}{lab}{prog}{done}")
    if isinstance(ev, FactEvent):
        return visible(f"{t}  {ev.name} = {ev.value}")
    if isinstance(ev, ErrorEvent):
        return visible(f"{t}ERROR {ev.kind}: {ev.cause}") + f"\n    {_where(ev)}: " + visible(ev.line)
    return None


def run(args: argparse.Namespace) -> int:
    parser = LogParser(args.engine)
    try:
        f = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        print(f"tunedeck parse-log: cannot read {args.file}: {e.strerror or e}", file=sys.stderr)
        return EXIT_UNREADABLE
    out = sys.stdout

    def emit(events) -> None:  # type: ignore[no-untyped-def]
        for ev in events:
            if isinstance(ev, StatEvent) and not args.stats:
                continue
            if args.json:
                out.write(terminal_json(json.dumps(jsonable(event_to_json(ev)), ensure_ascii=False)) + "\n")
            else:
                line = _text(ev) if not isinstance(ev, StatEvent) else f"  stat: {visible(ev.message)}"
                if line:
                    out.write(line + "\n")

    pending: list[LogEvent] = []  # events held until the start of the input is judged text

    def take(events: list[LogEvent]) -> None:
        pending.extend(events)
        if parser.judged:
            if parser.state.unreadable is None:
                emit(pending)
            pending.clear()

    try:
        with f:
            while True:
                chunk = f.read(65536)
                if not chunk:
                    break
                take(parser.feed(chunk))
            take(parser.finish())
    except OSError as e:
        print(f"tunedeck parse-log: error reading {args.file}: {e.strerror or e}", file=sys.stderr)
        return EXIT_UNREADABLE
    st = parser.state
    if st.unreadable is not None:
        print(f"tunedeck parse-log: {visible(args.file)}: unreadable: {st.unreadable}", file=sys.stderr)
        if args.json:
            out.write(terminal_json(json.dumps(_summary(st), ensure_ascii=False)) + "\n")
        return EXIT_UNREADABLE
    if args.json:
        out.write(terminal_json(json.dumps(_summary(st), ensure_ascii=False)) + "\n")
    else:
        att = f"; attempt {st.attempt} (from line {st.attempt_line})" if st.attempt > 1 else ""
        out.write(visible(f"engine: {st.engine or 'unknown'}; status: {st.status}; {st.describe()}{att}") + "\n")
        fl = st.failure
        if fl is not None:
            out.write(f"cause: {visible(fl.cause)}\nproof: {_where(fl)}: {visible(fl.line)}\n")
            if fl.wrapper:
                out.write(f"reported as: {visible(fl.wrapper)}\n")
            out.write(f"advice: {fl.advice}\n")
    if st.status == "ready":
        return EXIT_READY
    if st.status == "failed":
        return EXIT_FAILED
    return EXIT_STARTING
