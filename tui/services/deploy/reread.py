"""Deployments re-read from their nodes' processes, whoever follows them: the listings
(``runs``, ``runs --deployments``, the Runs view, the fleet view) call :func:`reread_deployments`
on every poll, so a deployment whose nodes died reads ``failed`` within one poll even when no
``logs --follow``, ``launch --wait`` or deployment view is watching it.

Each node's runs are re-read as any host's are (:func:`tunedeck.services.journal.reread_runs`: a dead
one settled from its own log); then :func:`settle_deployment` turns the members' records into the
deployment's state with the same :func:`~tunedeck.services.deploy.triage.triage` as the live watch:
``failed`` naming the node that failed first, ``ready`` once the head serves with every member
alive, its workers then ``up (worker)`` once their own start-up has ended too (they serve no HTTP:
:func:`~tunedeck.services.deploy.records.worker_start_ended` judges each from its own log).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Container, Mapping, Sequence

from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.reread import log_ages, log_state
from tunedeck.hostops.runstore import FAILED, READY, STALE, STARTING, STOPPED, RunRecord, RunStore
from tunedeck.services.deploy.records import (
    DeploymentRecord,
    DeploymentStore,
    HostFactory,
    close_hosts,
    mark_workers_up,
    member_records,
    open_hosts,
    worker_start_ended,
)
from tunedeck.services.deploy.triage import MemberState, triage
from tunedeck.services.journal import reread_runs
from tunedeck.util.safety import visible

log = logging.getLogger(__name__)

#: deployment states nothing re-reads any more
SETTLED = frozenset({STOPPED, FAILED})


def settle_deployment(
    rec: DeploymentRecord,
    runstore: RunStore | None = None,
    store: DeploymentStore | None = None,
    workers_up: Container[str] = (),
) -> DeploymentRecord:
    """The deployment's state from its members' run records (as last re-read); saved when it
    changed. ``workers_up``: the run ids of the workers whose own start-up has ended
    (:func:`workers_done`), marked ``up (worker)`` once the head is ready."""
    if rec.status in SETTLED:
        return rec
    runstore = runstore or RunStore()
    states = []
    for m, run in member_records(rec, runstore):
        if run is None:
            continue
        dead = run.status in (FAILED, STALE)
        states.append(
            MemberState(
                m.node,
                m.rank,
                m.role,
                m.run_id,
                FAILED if dead else run.status,
                run.diagnosis,
                run.proof,
                None,
                run.ended if dead else None,
                alive=not run.ended_,
                serves=m.serves,
            )
        )
    if not states:
        return rec
    verdict = triage(states, rec.nodes)
    if verdict.state == READY:
        mark_workers_up(rec, runstore, workers_up)
    if verdict.state not in (READY, FAILED) or verdict.state == rec.status:
        return rec
    store = store or DeploymentStore()
    cur = store.load(rec.deploy_id) or rec
    if cur.status in SETTLED or cur.status == verdict.state:
        return cur
    prev = cur.status
    cur.status = verdict.state
    now = time.time()
    if verdict.state == FAILED:
        cur.diagnosis, cur.proof, cur.first_failed = verdict.diagnosis, verdict.proof, verdict.first_failed
        cur.ended = cur.ended or now
        log.warning("deployment %s was %s and has failed: %s", cur.deploy_id, prev, visible(verdict.diagnosis or ""))
    cur.timeline.append({"t": now, "event": verdict.state, "diagnosis": verdict.diagnosis, "by": "re-read"})
    store.save(cur)
    return cur


def _ready_time(run: RunRecord) -> float | None:
    """When the run's record says it became ready (its timeline's first ``ready`` event)."""
    for e in run.timeline:
        t = e.get("t")
        if e.get("event") == READY and isinstance(t, (int, float)):
            return float(t)
    return None


async def workers_done(rec: DeploymentRecord, runstore: RunStore, hosts: Mapping[str, Host]) -> set[str]:
    """The run ids of the deployment's workers still ``starting``, with the head ready, whose own
    start-up has ended (:func:`worker_start_ended`: each worker's log read on its node, and how long
    it has been quiet). A node not in ``hosts`` (or that cannot be read) is left out: its workers
    stay ``starting`` until a later re-read."""
    pairs = member_records(rec, runstore)
    heads = [run for m, run in pairs if m.serves and run is not None]
    if not heads or any(run.status != READY for run in heads):
        return set()
    now = time.time()
    ready = [t for t in map(_ready_time, heads) if t is not None]
    head_ready_for = now - max(ready) if ready else 0.0
    out = set()
    for m, run in pairs:
        if m.serves or run is None or run.status != STARTING or not run.run_dir or m.node not in hosts:
            continue
        host = hosts[m.node]
        try:
            state = await log_state(host, run.run_dir, run.engine)
            age = (await log_ages(host, [run.run_dir])).get(run.run_dir)
        except (HostError, OSError) as e:
            log.warning("deployments: the log of worker %s on %s was not read: %s", run.run_id, m.node, visible(e))
            continue
        if worker_start_ended(state, age, head_ready_for):
            out.add(run.run_id)
    return out


async def reread_deployments(
    recs: Sequence[DeploymentRecord] | None = None,
    *,
    runstore: RunStore | None = None,
    store: DeploymentStore | None = None,
    factory: HostFactory | None = None,
    hosts: Mapping[str, Host] | None = None,
    timeout: float = 15.0,
) -> list[DeploymentRecord]:
    """Every deployment not yet settled, re-read from its nodes' processes (one connection per
    node, all nodes at once), then settled; a node that cannot be reached is logged and its
    members keep their last state. ``hosts``: connections already open (node → host; the nodes
    not in it are not re-read, and none is closed here), else one is opened per node with
    ``factory``. Returns the records (all of ``recs``, updated)."""
    store = store or DeploymentStore()
    runstore = runstore or RunStore()
    recs = list(store.all() if recs is None else recs)
    nodes = sorted({n for r in recs if r.status not in SETTLED for n in r.nodes})
    if hosts is not None:
        nodes = [n for n in nodes if n in hosts]
    if not nodes:
        return [settle_deployment(r, runstore, store) for r in recs]
    opened = hosts is None
    if hosts is None:
        hosts = await open_hosts(nodes, factory)

    async def one(node: str) -> None:
        try:
            await asyncio.wait_for(reread_runs(hosts[node], runstore), timeout)
        except (HostError, OSError, asyncio.TimeoutError) as e:
            log.warning("deployments: re-reading the runs on %s failed: %s", node, visible(e))

    try:
        await asyncio.gather(*(one(n) for n in nodes))
        up = [await workers_done(r, runstore, hosts) if r.status not in SETTLED else set[str]() for r in recs]
    finally:
        if opened:
            await close_hosts(hosts)
    return [settle_deployment(r, runstore, store, u) for r, u in zip(recs, up)]


__all__ = ["SETTLED", "reread_deployments", "settle_deployment", "workers_done"]
