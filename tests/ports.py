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


def free_port() -> int:
    """A loopback TCP port nothing listens on now, that no other test of this run will be given."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    n = int(worker[2:]) if worker[2:].isdigit() else 0
    size = (HIGH - LOW) // _SLICES
    lo = LOW + (n % _SLICES) * size
    rnd = random.Random()
    for _ in range(500):
        port = rnd.randrange(lo, lo + size)
        if port in _given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    raise RuntimeError(f"no free port in {lo}-{lo + size} after 500 tries")
