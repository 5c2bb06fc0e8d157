"""Free loopback ports for the servers tests start (sshd, simulators, fake engines).

A port from ``bind(0)`` is an ephemeral one (32768–60999 here): between that check and the
server's own bind, any test's outgoing connection may take it as its source port, and the
server then fails with "address already in use" (seen in full parallel runs). These ports
come from below the ephemeral range and above Ray's worker ports (10002–19999), from a slice
of their own per pytest-xdist worker, and are never handed out twice in one process.
"""

from __future__ import annotations

import os
import random
import socket

LOW, HIGH = 20000, 32000
_SLICES = 8
_given: set[int] = set()


def free_port(span: int = 1) -> int:
    """A loopback TCP port nothing listens on now, that no other test of this run will be given;
    with ``span``, the ``span`` ports from it on are all so (a server that also listens on its
    port + 1, as the simulated Ray driver's channel does)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    n = int(worker[2:]) if worker[2:].isdigit() else 0
    size = (HIGH - LOW) // _SLICES
    lo = LOW + (n % _SLICES) * size
    rnd = random.Random()
    for _ in range(500):
        port = rnd.randrange(lo, lo + size - span + 1)
        ports = range(port, port + span)
        if any(p in _given or not _bindable(p) for p in ports):
            continue
        _given.update(ports)
        return port
    raise RuntimeError(f"no {span} free port(s) in {lo}-{lo + size} after 500 tries")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
