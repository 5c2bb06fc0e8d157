"""Multi-node deployments: launched, watched and stopped as one unit.

A deployment is the plan of a multi-node profile (:mod:`tunedeck.profiles.deploy`) put on its nodes:
one run folder per detached process on its node (the launcher's own), one deployment id recorded
here (``state_dir()/deployments/<id>.json``) with its member runs. Nothing is scheduled by
tunedeck: the nodes run SGLang's launcher, or Ray and vLLM.

- :func:`preflight` runs on every node: GPU count and architecture, the engine version (equal on
  all nodes), nothing alive and no foreign GPU process, the rendezvous port free on the head, and
  the head reachable *from each worker* (a listener on the head's rendezvous port, a TCP connect
  run on the worker).
- :func:`launch` starts the steps in the engine's order (head first), waiting for ``ray status``
  where the plan says so.
- :func:`watch` follows every member with the startup tracker; :func:`triage` names the node that
  failed first and its proving line, not the one that timed out last.
- :func:`stop` stops the members serving process first, then the workers, then the rest of the
  head, and checks that every node's GPUs hold none of their processes.
- :func:`merged_log` reads every member's log with a node tag on each line.
"""

from __future__ import annotations

from tunedeck.hostops.hosts import target_name
from tunedeck.hostops.runstore import RunStore
from tunedeck.profiles.deploy import Step
from tunedeck.services.deploy.launch import launch, wait_ray_gpus
from tunedeck.services.deploy.logs import line_time, log_time, merge_logs, merged_log, read_log
from tunedeck.services.deploy.preflight import Finding, checker_python, preflight
from tunedeck.services.deploy.records import (
    LAUNCHING,
    PARTIAL,
    SECONDARY_KINDS,
    WORKER_QUIET_S,
    DeploymentRecord,
    DeploymentStore,
    HostFactory,
    Member,
    close_hosts,
    default_host_factory,
    dress_sim,
    mark_workers_up,
    member_records,
    open_hosts,
    resolve_head_address,
    worker_start_ended,
)
from tunedeck.services.deploy.reread import SETTLED, reread_deployments, settle_deployment, workers_done
from tunedeck.services.deploy.stop import MemberStop, stop
from tunedeck.services.deploy.triage import MemberState, Verdict, ended_at, member_state, triage, watch

__all__ = [
    "LAUNCHING",
    "PARTIAL",
    "SECONDARY_KINDS",
    "SETTLED",
    "WORKER_QUIET_S",
    "DeploymentRecord",
    "DeploymentStore",
    "Finding",
    "HostFactory",
    "Member",
    "MemberState",
    "MemberStop",
    "RunStore",
    "Step",
    "Verdict",
    "checker_python",
    "close_hosts",
    "default_host_factory",
    "dress_sim",
    "ended_at",
    "launch",
    "line_time",
    "log_time",
    "mark_workers_up",
    "member_records",
    "member_state",
    "merge_logs",
    "merged_log",
    "open_hosts",
    "preflight",
    "read_log",
    "reread_deployments",
    "resolve_head_address",
    "settle_deployment",
    "stop",
    "target_name",
    "triage",
    "wait_ray_gpus",
    "watch",
    "worker_start_ended",
    "workers_done",
]
