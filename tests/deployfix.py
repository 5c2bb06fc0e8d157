"""Multi-node deployment records for tests, as ``tunedeck deploy`` saves them."""

from __future__ import annotations

import time
from typing import Any

from tunedeck.services.deploy import DeploymentRecord, Member


def tp_deployment(
    deploy_id: str, nodes: list[str], run_ids: list[str], *, serves: bool = True, port: int | None = None, **fields: Any
) -> DeploymentRecord:
    """A TP deployment over ``nodes``: node 0 the head, the others workers, one server run each
    (``run_ids[i]`` on ``nodes[i]``); the head serves (on ``port``) unless ``serves`` is false.
    ``fields`` set the rest of the record (by default SGLang, profile ``p-<id>``, the rendezvous
    on the head's port 5000, HTTP on 30000, made now)."""
    members = [
        Member(node, rank, "head" if rank == 0 else "worker", "server", run_id)
        for rank, (node, run_id) in enumerate(zip(nodes, run_ids, strict=True))
    ]
    members[0].serves, members[0].port = serves, port
    record: dict[str, Any] = {
        "deploy_id": deploy_id,
        "profile": f"p-{deploy_id}",
        "engine": "sglang",
        "mode": "tp",
        "nodes": list(nodes),
        "rendezvous": f"{nodes[0]}:5000",
        "http_port": 30000,
        "created": time.time(),
        "members": members,
    }
    return DeploymentRecord(**{**record, **fields})
