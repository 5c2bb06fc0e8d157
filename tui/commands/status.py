"""``tunedeck status``: GPUs, host figures and servers once, for people and scripts.

Exit status: 0 when everything was read and the GPUs are ok, 1 when part of
it failed (GPU state not ok, host figures unreadable; the rest is still
printed), 2 for bad input.

With several hosts (``--host A --host B``, ``--host @GROUP``) every host is read at
once, one connection each: ``--json`` prints ``{"hosts": [...]}`` (each host's usual
object, or ``{"target", "error": {"kind", "message"}}`` for a host that did not
answer). Exit status: 0 every host answered and all is ok, 1 every host answered
but part of one failed, 3 at least one host did not answer (unreachable, refused,
no answer in time: the others are still printed), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, Sequence

from tunedeck.commands import Subparsers, add_command
from tunedeck.fmt import gib, text_table, uptime
from tunedeck.model import NA, StatusSnapshot, is_na

log = logging.getLogger(__name__)

_ENGINES = ("auto", "sglang", "vllm")


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        subparsers,
        common,
        "status",
        description="Print the GPUs (nvidia-smi), host CPU/memory/load and inference servers "
        "of the target host once. Servers tunedeck launched are listed automatically; "
        "add others with --server. Several --host values (or --host @GROUP, a [groups] entry "
        'of the config file) read every host at once: --json then prints {"hosts": [...]}, and '
        "the exit status is 3 when a host did not answer.",
    )
    p.add_argument(
        "--server",
        metavar="URL",
        action="append",
        default=[],
        help="also probe this server (http://host:port; a loopback URL means the target host's "
        "loopback, reached through an SSH port forward); repeatable. "
        "Prefix 'sglang=' or 'vllm=' to name the engine",
    )
    p.add_argument("--json", action="store_true", help="print JSON (N/A values are null)")
    p.set_defaults(func=run_status)


def _parse_servers(items: Sequence[str]) -> list[Any]:
    from tunedeck.collectors.servers import ServerSpec

    specs = []
    for item in items:
        engine = "auto"
        url = item
        head, sep, tail = item.partition("=")
        if sep and head in _ENGINES:
            engine, url = head, tail
        specs.append(ServerSpec.from_url(url, engine=engine))
    return specs


async def run_status(args: argparse.Namespace) -> int:
    from tunedeck.collectors.status import collect_status, status_json
    from tunedeck.hostops.hosts import HostError
    from tunedeck.services.journal import reread_runs
    from tunedeck.services.targets import get_host
    from tunedeck.util.safety import UnsafeInput

    try:
        servers = _parse_servers(args.server)
    except ValueError as exc:
        print(f"tunedeck status: --server: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "fleet", False):
        return await run_fleet_status(args, servers)
    try:
        host = get_host(args.host, demo=args.demo)
    except UnsafeInput as exc:
        print(f"tunedeck status: --host: {exc}", file=sys.stderr)
        return 2
    except HostError as exc:
        print(f"tunedeck status: {exc}", file=sys.stderr)
        return 1
    try:
        if args.sim:
            from tunedeck.services import runtime

            try:
                # the host's simulated GPUs (${TUNEDECK_HOME}/sim) where it has no nvidia-smi of its own
                await runtime.ensure_sim(host)
            except (runtime.RuntimeUnavailable, HostError) as exc:
                print(f"tunedeck status: --sim: {exc}", file=sys.stderr)
                return 1
        try:
            # the runs re-read from their processes: a dead one is settled (failed, with its cause)
            # and not shown as a server; the journal corrected when it had been ready
            await reread_runs(host)
        except HostError as exc:
            log.warning("%s: re-reading the runs failed: %s", host.target, exc)
        snap = await collect_status(host, servers)
    finally:
        try:
            await host.close()
        except Exception as exc:  # noqa: BLE001 - closing must not hide the result
            log.warning("%s: closing the connection failed: %r", host.target, exc)
    if args.json:
        print(json.dumps(status_json(snap), indent=2))
    else:
        print(format_status(snap))
    failed = snap.gpus.state != "ok" or bool(snap.host_error)
    return 1 if failed else 0


#: exit status when at least one host of several did not answer
NOT_ALL_ANSWERED = 3


async def run_fleet_status(args: argparse.Namespace, servers: Sequence[Any] = ()) -> int:
    """``status`` with several hosts: every host at once, ``{"hosts": [...]}`` with ``--json``."""
    from tunedeck.collectors.fleet import GroupError, expand_targets, fleet_json, fleet_status
    from tunedeck.util.safety import UnsafeInput

    try:
        targets = expand_targets(args.hosts)
    except (GroupError, UnsafeInput) as exc:
        print(f"tunedeck status: --host: {exc}", file=sys.stderr)
        return 2
    entries = await fleet_status(targets, servers, sim=args.sim)
    if args.json:
        print(json.dumps(fleet_json(entries), indent=2))
    else:
        print(format_fleet(entries))
    if not all(e.answered for e in entries):
        return NOT_ALL_ANSWERED
    partial = any(e.snapshot is not None and (e.snapshot.gpus.state != "ok" or e.snapshot.host_error) for e in entries)
    return 1 if partial else 0


def _pair(a: str, b: str) -> str:
    return "N/A" if a == b == "N/A" else f"{a}/{b}"


def format_fleet(entries: Sequence[Any]) -> str:
    """One row per host (GPUs summarised), then the servers of every host with a host column."""
    from tunedeck.collectors.smi import STATE_LABELS
    from tunedeck.model import summarise_gpus

    lines: list[str] = []
    rows = []
    for e in entries:
        if e.snapshot is None:
            err = e.error
            kind = err.kind if err is not None else "error"
            rows.append(
                [
                    e.target,
                    "failed",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    f"{kind}: {err.message if err is not None else 'no answer'}",
                ]
            )
            continue
        snap = e.snapshot
        s = summarise_gpus(snap.gpus)
        ready = sum(1 for x in snap.servers if x.state == "ready")
        note = ""
        if snap.gpus.state != "ok":
            label = STATE_LABELS.get(snap.gpus.state, snap.gpus.state)
            note = label + (f": {snap.gpus.message}" if snap.gpus.message and snap.gpus.message != label else "")
        elif snap.host_error:
            note = f"host figures: {snap.host_error}"
        rows.append(
            [
                snap.target,
                "ok" if snap.gpus.state == "ok" and not snap.host_error else "partial",
                str(s.count),
                s.model + (f" +{s.models - 1}" if s.models > 1 else "") or "N/A",
                _f(s.util_mean, suffix="%"),
                _pair(
                    gib(s.mem_used * 2**20 if not is_na(s.mem_used) else NA),
                    gib(s.mem_total * 2**20 if not is_na(s.mem_total) else NA),
                ),
                _pair(_f(s.power_draw), _f(s.power_limit)),
                _f(s.temp_max, suffix="C"),
                f"{ready}/{len(snap.servers)}",
                note,
            ]
        )
    answered = sum(1 for e in entries if e.answered)
    lines.append(f"Hosts: {len(entries)} ({answered} answered)")
    lines += _table(
        ["HOST", "STATE", "GPUS", "MODEL", "UTIL", "MEM GiB", "POWER W", "MAX TEMP", "SERVERS", "NOTE"], rows
    )
    srows = [
        [e.snapshot.target, *_server_cells(x)]
        for e in entries
        for x in (e.snapshot.servers if e.snapshot is not None else ())
    ]
    if srows:
        lines.append("Servers:")
        lines += _table(["HOST", *_SERVER_COLUMNS], srows)
    return "\n".join(lines)


# ---------------------------------------------------------------------- human output


def _f(v: Any, fmt: str = "{:.0f}", suffix: str = "") -> str:
    if v is None or is_na(v):
        return "N/A"
    try:
        return fmt.format(v) + suffix
    except (ValueError, TypeError):
        return str(v)


#: the columns of a server's row, in one host's table and in the fleet's (after its HOST)
_SERVER_COLUMNS = ("NAME", "ENGINE", "STATE", "MODEL", "RUN", "WAIT", "KV", "GEN tok/s")


def _server_cells(s: Any) -> list[str]:
    """A server's :data:`_SERVER_COLUMNS`: name, engine, state, model, requests running and
    waiting, KV cache in use, generation speed."""
    return [
        s.name,
        s.engine,
        s.state,
        s.model or "N/A",
        _f(s.running),
        _f(s.waiting),
        _f(s.kv_cache_usage * 100 if not is_na(s.kv_cache_usage) else NA, suffix="%"),
        _f(s.gen_throughput, "{:.1f}"),
    ]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    return text_table(headers, rows, indent=indent)


def format_status(snap: StatusSnapshot) -> str:
    from tunedeck.collectors.history import memory_percent
    from tunedeck.collectors.smi import STATE_LABELS

    lines: list[str] = []
    g = snap.gpus
    hostname = snap.host.hostname if snap.host else ""
    title = f"{snap.target}" + (f" ({hostname})" if hostname and hostname != snap.target else "")
    lines.append(f"Target: {title}")
    if g.state == "ok":
        lines.append(f"GPUs: {len(g.gpus)}")
        rows = []
        for x in g.gpus:
            mem = f"{_f(x.memory_used)}/{_f(x.memory_total)}"
            pct = memory_percent(x.memory_used, x.memory_total)
            rows.append(
                [
                    str(x.index),
                    x.name or "N/A",
                    _f(x.utilization, suffix="%"),
                    mem,
                    _f(pct, suffix="%"),
                    _f(x.temperature, suffix="C"),
                    f"{_f(x.power_draw)}/{_f(x.power_limit)}",
                    _f(x.clock_sm),
                ]
            )
        lines += _table(["GPU", "NAME", "UTIL", "MEM MiB", "MEM%", "TEMP", "POWER W", "SM MHz"], rows)
        if g.processes:
            lines.append("Processes:")
            prow = [
                [str(p.pid), "?" if p.gpu_index is None else str(p.gpu_index), _f(p.used_memory), p.name]
                for p in g.processes
            ]
            lines += _table(["PID", "GPU", "MEM MiB", "NAME"], prow)
    else:
        label = STATE_LABELS.get(g.state, g.state)
        lines.append(f"GPUs: {label}" + (f": {g.message}" if g.message and g.message != label else ""))
    h = snap.host
    if h is not None:
        lines.append(
            f"Host: CPU {_f(h.cpu_percent, suffix='%')} of {_f(h.cpu_count)} cores, "
            f"memory {gib(h.mem_used)}/{gib(h.mem_total)} GiB, "
            f"load {_f(h.load1, '{:.2f}')} {_f(h.load5, '{:.2f}')} {_f(h.load15, '{:.2f}')}, "
            f"up {uptime(h.uptime)}"
        )
    else:
        lines.append(f"Host: unavailable: {snap.host_error or 'unknown error'}")
    if snap.servers:
        lines.append("Servers:")
        rows = [
            [*_server_cells(s), _f(s.ttft_p50 * 1000 if not is_na(s.ttft_p50) else NA, suffix=" ms"), s.message]
            for s in snap.servers
        ]
        lines += _table([*_SERVER_COLUMNS, "TTFT p50", "NOTE"], rows)
    return "\n".join(lines)
