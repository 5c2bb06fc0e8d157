"""A deployment's local record (its members, one run each on its node), the store of records, and
the nodes' hosts."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Container, Mapping, Sequence

from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.runstore import STARTING, WORKER_UP, RecordStore, RunRecord, RunStore
from tunedeck.hostops.target import parse_target
from tunedeck.logparse import PHASES, ParseState
from tunedeck.profiles.deploy import node_host
from tunedeck.profiles.model import ServerProfile
from tunedeck.services import runtime
from tunedeck.util.paths import state_dir
from tunedeck.util.records import pick

log = logging.getLogger(__name__)

LAUNCHING, PARTIAL = "launching", "partial"
#: failure kinds that are symptoms of a peer's failure (a rank that hangs in NCCL or waits at the
#: rendezvous until its timeout): on a tie, a node with another kind failed first
SECONDARY_KINDS = frozenset({"nccl", "rendezvous", "terminated", "watchdog"})

HostFactory = Callable[[str], Host]


@dataclass
class Member:
    """One detached process of a deployment: its node, its place, its run."""

    node: str
    rank: int
    role: str
    kind: str
    run_id: str
    serves: bool = False
    port: int | None = None

    @property
    def tag(self) -> str:
        return self.node if self.kind == "server" else f"{self.node}:{self.kind}"


@dataclass
class DeploymentRecord:
    deploy_id: str
    profile: str
    engine: str
    mode: str
    nodes: list[str]
    rendezvous: str
    http_port: int
    created: float
    sim: bool = False
    members: list[Member] = field(default_factory=list)
    status: str = LAUNCHING
    diagnosis: str | None = None
    proof: str | None = None
    first_failed: str | None = None
    ended: float | None = None
    timeline: list[dict[str, Any]] = field(default_factory=list)

    @property
    def head(self) -> str:
        return self.nodes[0]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def record_id(self) -> str:
        return self.deploy_id

    def result_meta(self) -> dict[str, Any]:
        """What a benchmark result records of the deployment it measured."""
        return {
            "id": self.deploy_id,
            **pick(self, "profile", "engine", "mode", "head", "sim"),
            "nodes": list(self.nodes),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "DeploymentRecord":
        data = dict(d)
        data["members"] = [Member(**m) for m in data.get("members", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def stop_order(self) -> list[Member]:
        """The serving process, then the workers, then the rest of the head (see the plan)."""
        first = [m for m in self.members if m.serves]
        workers = [m for m in self.members if not m.serves and m.role == "worker"]
        rest = [m for m in self.members if not m.serves and m.role == "head"]
        return first + workers + rest


class DeploymentStore(RecordStore[DeploymentRecord]):
    """Local deployment records, one JSON file each, written atomically."""

    def __init__(self, root: Path | None = None) -> None:
        super().__init__(root or state_dir() / "deployments", DeploymentRecord.from_json)

    def all(self) -> list[DeploymentRecord]:
        return sorted(self.records(), key=lambda r: r.created)

    def find(self, ident: str) -> DeploymentRecord | None:
        """A deployment by id or unique prefix."""
        if not re.match(r"^[0-9a-f]{1,32}$", ident or ""):
            return None
        hits = [r for r in self.all() if r.deploy_id.startswith(ident)]
        exact = [r for r in hits if r.deploy_id == ident]
        return exact[0] if exact else hits[-1] if len(hits) == 1 else None

    def for_run(self, run_id: str) -> DeploymentRecord | None:
        for r in self.all():
            if any(m.run_id == run_id for m in r.members):
                return r
        return None


def resolve_head_address(profile: ServerProfile) -> str | None:
    """What the workers dial: ``[deploy] head_address`` (else the first of ``node_addresses``),
    else the head's host name after ``~/.ssh/config`` (an alias's ``HostName``); None leaves it to
    the plan builder."""
    if profile.deploy.head_address or profile.deploy.node_addresses or not profile.nodes:
        return None
    head = profile.nodes[0]
    if head == "local":
        return "127.0.0.1"
    try:
        from tunedeck.hostops.sshconfig import resolve_endpoint

        return resolve_endpoint(parse_target(head)).host
    except Exception:  # noqa: BLE001 - a bad alias is reported when connecting; keep the plain name
        return node_host(head)


def default_host_factory(sim: bool = False) -> HostFactory:
    from tunedeck.services.targets import get_host

    def make(node: str) -> Host:
        return get_host(node)

    return make


def member_records(rec: DeploymentRecord, runstore: RunStore | None = None) -> list[tuple[Member, RunRecord | None]]:
    runstore = runstore or RunStore()
    return [(m, runstore.load(m.run_id)) for m in rec.members]


#: a worker's log that has not grown for this long, with the head ready at least as long: the
#: worker's start-up is over even when its log shows no phase past weight loading
WORKER_QUIET_S = 10.0


def worker_start_ended(state: ParseState | None, log_age: float | None, head_ready_for: float) -> bool:
    """A worker (it serves no HTTP) is ``up (worker)`` once the head is ready *and* its own
    start-up has ended: its log shows its own ready line or a phase past weight loading, with no
    fatal line; or its log has been quiet since the head became ready (``log_age``: seconds since
    the worker's log last grew, None when unknown; ``head_ready_for``: seconds since the head
    became ready; both at least :data:`WORKER_QUIET_S`)."""
    if state is not None:
        if state.failure is not None:
            return False
        past = state.phase in PHASES and PHASES.index(state.phase) > PHASES.index("weight-loading")
        if state.ready_line is not None or state.weights_done or past:
            return True
    return log_age is not None and min(log_age, head_ready_for) >= WORKER_QUIET_S


def mark_workers_up(rec: DeploymentRecord, runstore: RunStore, ended: Container[str]) -> list[str]:
    """The head is ready: each live worker still ``starting`` whose own start-up has ended (its run
    id in ``ended``: :func:`worker_start_ended`) is ``up (worker)``. Returns their run ids."""
    done = []
    for m, run in member_records(rec, runstore):
        if m.serves or run is None or run.status != STARTING or run.run_id not in ended:
            continue
        run.status = WORKER_UP
        run.timeline.append({"t": time.time(), "event": WORKER_UP, "head": rec.head})
        runstore.save(run)
        done.append(run.run_id)
    return done


async def open_hosts(nodes: Sequence[str], factory: HostFactory | None = None) -> dict[str, Host]:
    factory = factory or default_host_factory()
    return {n: factory(n) for n in nodes}


async def dress_sim(hosts: Mapping[str, Host], *, python: str | None = None) -> dict[str, str]:
    """Give each node of a ``--sim`` deployment the simulated nvidia-smi where it has none of its
    own (:func:`tunedeck.services.runtime.ensure_sim`); node → why not, for the nodes where that failed
    (their GPU queries then find no nvidia-smi)."""

    async def one(node: str, host: Host) -> tuple[str, str | None]:
        try:
            await runtime.ensure_sim(host, python=python)
        except (runtime.RuntimeUnavailable, HostError, OSError) as e:
            log.warning("%s: no simulated GPUs: %s", node, e)
            return node, str(e)
        return node, None

    done = await asyncio.gather(*(one(n, h) for n, h in hosts.items()))
    return {n: why for n, why in done if why is not None}


async def close_hosts(hosts: Mapping[str, Host]) -> None:
    await asyncio.gather(*(h.close() for h in hosts.values()), return_exceptions=True)
