"""The multi-node paths of ``launch``, ``runs``, ``logs`` and ``stop``: a deployment is one unit."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from tunedeck.commands._ask import confirm
from tunedeck.commands._cli import fail, noted_table
from tunedeck.commands._runs import WAIT_EXIT, age, wait_ended
from tunedeck.fmt import text_table
from tunedeck.hostops.hosts import HostError
from tunedeck.hostops.runstop import process_alive
from tunedeck.hostops.runstore import RunStore
from tunedeck.model import jsonable
from tunedeck.profiles.model import ProfileError, ServerProfile
from tunedeck.services import deploy as D
from tunedeck.util.safety import visible


def _print(obj: Any) -> None:
    print(json.dumps(jsonable(obj), indent=2))


# ============================================================================ launch


async def launch(args: argparse.Namespace, profile: ServerProfile) -> int:
    """``tunedeck launch NAME`` for a multi-node profile: pre-flight on every node, then every node
    started detached in the engine's order; ``--wait`` follows them all until ready or the first
    failure."""
    from tunedeck.profiles.deploy import build_deployment

    if args.demo:
        return fail(
            "launch",
            f"profile {profile.name!r} runs on its nodes ({', '.join(profile.nodes)}); "
            "--demo is one machine: use --sim to run the simulator on the nodes",
        )
    if args.host not in (None, "local"):
        return fail("launch", f"profile {profile.name!r} names its nodes ({', '.join(profile.nodes)}); drop --host")
    if args.cmd or args.env or args.port is not None:
        return fail("launch", "a multi-node profile takes no --cmd, --env or --port: set them in the profile")
    try:
        plan = build_deployment(
            profile,
            head_address=D.resolve_head_address(profile),
            sim=args.sim,
            allow_dangerous=args.allow_dangerous_env,
        )
    except ProfileError as e:
        return fail("launch", str(e))
    hosts = await D.open_hosts(plan.nodes)
    try:
        quiet = args.json
        if not args.no_preflight:
            findings = await D.preflight(plan, hosts, python=D.checker_python(plan))
            errors = [f for f in findings if f.severity == "error"]
            for f in findings:
                if not quiet or f.severity == "error":
                    print(f"pre-flight: {visible(str(f))}", file=sys.stderr)
            if errors:
                if args.json:
                    _print({"launched": False, "preflight": [f.__dict__ for f in findings]})
                return fail(
                    "launch",
                    f"refused: pre-flight found {len(errors)} problem(s) "
                    f"(first: {errors[0].node}: {errors[0].message})",
                )

        def say(msg: str) -> None:
            if not quiet:
                print(visible(msg), file=sys.stderr)

        rec = await D.launch(plan, hosts, on_event=say, ray_wait=float(profile.deploy.ray_wait))
        if rec.status == "failed":
            if args.json:
                _print({"deployment": rec.to_json()})
            return fail("launch", rec.diagnosis or "the deployment did not start")
        if not args.json:
            print(
                f"launched deployment {rec.deploy_id}: {len(rec.members)} processes on {len(rec.nodes)} nodes "
                f"(head {rec.head}, rendezvous {rec.rendezvous})",
                file=sys.stderr if args.wait else sys.stdout,
            )
        if not args.wait:
            if args.json:
                _print({"deployment": rec.to_json()})
            return 0
        last = [""]

        def show(states: list[D.MemberState], v: D.Verdict) -> None:
            line = "  ".join(f"{s.node}: {s.progress.phase or s.state if s.progress else s.state}" for s in states)
            if line != last[0] and not quiet:
                last[0] = line
                print(line, file=sys.stderr)

        stall_s, _ = args.stall_after
        verdict, states = await D.watch(rec, hosts, timeout=args.timeout, stall_after=stall_s, on_update=show)
    except HostError as e:
        return fail("launch", str(e))
    finally:
        await D.close_hosts(hosts)
    rec = D.DeploymentStore().load(rec.deploy_id) or rec
    if args.json:
        _print(
            {
                "deployment": rec.to_json(),
                "state": verdict.state,
                "diagnosis": verdict.diagnosis,
                "proof": verdict.proof,
                "first_failed": verdict.first_failed,
                "never_joined": list(verdict.never_joined),
                "members": [s.jsonable() for s in states],
            }
        )
    serving = f"(serving on {rec.head}, port {rec.http_port})"
    code = wait_ended(args, verdict.state, f"deployment {rec.deploy_id}", serving, f"tunedeck stop {rec.deploy_id}")
    if code is not None:
        return code
    fail("launch", f"deployment {rec.deploy_id} {verdict.state}: {verdict.diagnosis or ''}")
    if verdict.proof:
        print(f"  log: {visible(verdict.proof)}", file=sys.stderr)
    print(f"  (tunedeck stop {rec.deploy_id} stops every node)", file=sys.stderr)
    return WAIT_EXIT.get(verdict.state, 1)


# ============================================================================ runs


async def member_rows(rec: D.DeploymentRecord, runstore: RunStore) -> list[dict[str, Any]]:
    """Each member with its run's recorded state and whether its process is alive now."""
    hosts = await D.open_hosts(rec.nodes)
    rows = []
    try:
        for m, run in D.member_records(rec, runstore):
            alive = None
            if run is not None and run.pid:
                try:
                    alive = await process_alive(hosts[m.node], run.pid, run.starttime)
                except HostError:
                    alive = None
            rows.append(
                {
                    "node": m.node,
                    "rank": m.rank,
                    "role": m.role,
                    "kind": m.kind,
                    "run_id": m.run_id,
                    "status": run.status if run else "unknown",
                    "pid": run.pid if run else None,
                    "alive": alive,
                    "diagnosis": run.diagnosis if run else None,
                }
            )
    finally:
        await D.close_hosts(hosts)
    return rows


async def show_deployment(args: argparse.Namespace, rec: D.DeploymentRecord) -> int:
    rows = await member_rows(rec, RunStore())
    if args.json:
        _print({**rec.to_json(), "members": rows})
        return 0
    print(
        f"deployment {rec.deploy_id}  {rec.status}  {rec.engine} {rec.mode}  profile {rec.profile}  "
        f"rendezvous {rec.rendezvous}  age {age(time.time() - rec.created)}"
    )
    if rec.diagnosis:
        print(f"  {visible(rec.diagnosis)}")
    table = [
        (
            visible(r["node"])[:28],
            r["role"],
            r["kind"],
            r["run_id"],
            r["status"],
            r["pid"] or "-",
            "yes" if r["alive"] else "no" if r["alive"] is False else "?",
        )
        for r in rows
    ]
    for line in text_table(("NODE", "ROLE", "KIND", "RUN", "STATUS", "PID", "ALIVE"), table, indent="  ", right=(5,)):
        print(line)
    return 0


def list_deployments(json_out: bool) -> list[dict[str, Any]] | None:
    recs = D.DeploymentStore().all()
    if json_out:
        return [r.to_json() for r in recs]
    if recs:
        rows = [
            (
                r.deploy_id,
                r.status,
                r.engine,
                r.mode,
                visible(r.profile),
                visible(", ".join(f"{m.node} ({m.role} {m.kind} {m.run_id})" for m in r.members)),
            )
            for r in recs
        ]
        notes = [[r.diagnosis] if r.diagnosis else [] for r in recs]
        headers = ("DEPLOYMENT", "STATUS", "ENGINE", "MODE", "PROFILE", "NODES")
        print("\n" + "\n".join(noted_table(headers, rows, notes, under="STATUS")))
    return None


# ============================================================================ logs


#: seconds between two samples of a followed deployment's logs
FOLLOW_EVERY = 0.5


async def logs(args: argparse.Namespace, rec: D.DeploymentRecord) -> int:
    node = getattr(args, "node", None)
    if node is not None and node not in rec.nodes and node not in [m.tag for m in rec.members]:
        return fail("logs", f"deployment {rec.deploy_id} has no node {node!r} (nodes: {', '.join(rec.nodes)})")
    if getattr(args, "follow", False):
        return await follow_logs(args, rec, node)
    hosts = await D.open_hosts(rec.nodes)
    try:
        lines = await D.merged_log(rec, hosts, node=node)
    except HostError as e:
        return fail("logs", str(e))
    finally:
        await D.close_hosts(hosts)
    if args.json:
        _print({"deployment": rec.deploy_id, "node": node, "lines": [{"node": t, "line": ln} for t, ln in lines]})
        return 0
    width = max((len(t) for t, _ in lines), default=0)
    out = sys.stdout
    for tag, line in lines:
        out.write(f"[{tag:<{width}}] {visible(line)}\n")
    out.flush()
    return 0


async def follow_logs(args: argparse.Namespace, rec: D.DeploymentRecord, node: str | None) -> int:
    """Every member's log from its start, then as it grows (each followed from its byte offset,
    one connection per node, a lost link resumed where it stopped), a node tag on every line;
    ends when every member has ended, or at Ctrl-C."""
    from tunedeck.collectors.deployment import DeploymentCollector
    from tunedeck.commands.logs import LinkLines

    ended = {"failed", "exited", "stopped"}
    width = max((len(m.tag) for m in rec.members), default=0)
    node_of = {m.tag: m.node for m in rec.members}  # a tag is the node, or "node:kind"
    shown = None if node is None else node_of.get(node, node)
    out = sys.stdout
    collector = DeploymentCollector(rec)
    store = D.DeploymentStore()
    link = LinkLines()
    try:
        await collector.start()
        while True:
            snap = await collector.sample()
            for tag, line in snap.lines:
                if node is not None and node not in (tag, node_of.get(tag)):
                    continue
                if args.json:
                    out.write(json.dumps({"deployment": rec.deploy_id, "node": tag, "line": line}, ensure_ascii=False))
                    out.write("\n")
                else:
                    out.write(f"[{tag:<{width}}] {visible(line)}\n")
            out.flush()
            if snap.dropped:
                print(f"tunedeck logs: {snap.dropped} lines dropped (they came faster than printed)", file=sys.stderr)
            for tag, why in snap.link_errors:
                link.lost(tag, why)
            down = {tag for tag, _ in snap.link_errors}
            for tag in sorted(link.down - down):
                link.back(tag)
            states = [m for m in snap.members if shown is None or m.node == shown]
            over = bool(states) and all(m.state in ended and not m.alive for m in states)
            # a stop from anywhere (another terminal, the dashboard) is in the local record at once
            cur = await asyncio.to_thread(store.load, rec.deploy_id)
            if cur is not None and cur.status == "stopped":
                over = True
            if over and not snap.lines:
                v = snap.verdict
                state = cur.status if cur is not None and cur.status in ("stopped", "failed") else v.state
                if state not in ("stopped", "failed") and all(m.state == "stopped" for m in states):
                    state = "stopped"  # every member stopped on request, before the stop wrote its record
                print(
                    f"tunedeck logs: deployment {rec.deploy_id} has ended ({state})"
                    + (f": {visible(v.diagnosis)}" if v.diagnosis else ""),
                    file=sys.stderr,
                )
                return 0
            await asyncio.sleep(FOLLOW_EVERY)
    except KeyboardInterrupt:
        return 0
    finally:
        await collector.aclose()


# ============================================================================ stop


async def stop(args: argparse.Namespace, rec: D.DeploymentRecord) -> int:
    order = rec.stop_order()
    desc = ", ".join(f"{m.node} ({m.kind})" for m in order)
    question = f"Stop deployment {rec.deploy_id} ({rec.profile}) on {len(rec.nodes)} nodes, in this order: {desc}?"
    if not await confirm(question, prog="stop", yes=args.yes, refused="not stopped"):
        return 1
    hosts = await D.open_hosts(rec.nodes)
    try:
        results, free = await D.stop(rec, hosts, grace=args.grace, gpu_wait=args.gpu_wait)
    finally:
        await D.close_hosts(hosts)
    ok = all(r.state in ("stopped", "exited", "stale") for r in results) and all(v is not False for v in free.values())
    if args.json:
        _print(
            {
                "deployment": rec.deploy_id,
                "state": "stopped" if ok else "partial",
                "members": [r.__dict__ for r in results],
                "gpus_free": free,
            }
        )
    else:
        for r in results:
            print(f"{r.node} ({r.kind}): {visible(r.message)}")
        for node, v in free.items():
            print(
                f"{node}: GPUs {'free' if v else 'still list its processes' if v is False else 'unknown (no nvidia-smi)'}"
            )
    return 0 if ok else 1


def find(ident: str | None) -> D.DeploymentRecord | None:
    return D.DeploymentStore().find(ident) if ident else None
