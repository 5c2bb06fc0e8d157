"""From what the user typed to a :class:`~tunedeck.hostops.hosts.Host`: ``--host``/``--demo``, a run record.

Here, above both the host primitives and the simulator, because ``--demo`` is a
:class:`~tunedeck.hostops.localhost.LocalHost` dressed by :mod:`tunedeck.sim.demo`.
"""

from __future__ import annotations

from tunedeck.hostops.hosts import Host
from tunedeck.hostops.localhost import LocalHost
from tunedeck.hostops.runstore import RunRecord
from tunedeck.hostops.target import parse_target


def get_host(target: str | None = None, *, demo: bool = False) -> Host:
    """The Host for a CLI ``--host``/``--demo`` pair. No connection is made yet."""
    if demo:
        from tunedeck.sim.demo import demo_host

        return demo_host()
    if target is None or target == "local":
        return LocalHost()
    t = parse_target(target)
    if t.is_local:
        return LocalHost()
    from tunedeck.hostops.ssh import SshHost

    return SshHost(t)


def host_for_record(rec: RunRecord) -> Host:
    if rec.target == "demo":
        return get_host(None, demo=True)
    return get_host(None if rec.target == "local" else rec.target)
