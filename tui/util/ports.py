"""Who listens on a TCP port of a host: the listening socket's inode in ``/proc/net/tcp{,6}``,
then the processes whose ``/proc/PID/fd`` hold that socket.

One POSIX sh script (dash, bash and busybox sh; ``ls``, ``awk``, ``sed``, ``grep``), run through
any host object with ``run_script`` (a LocalHost, the demo host, an SSH host), never a command
built from strings. It answers for one port, and, given a run's session id (the detached
wrapper's pid: every process it starts shares its session) and run id (the ``TUNEDECK_RUN_ID``
its processes carry), whether each listener belongs to that run.

``state``:

* ``free``: nothing listens on the port;
* ``own``: a process of the run's tree listens on it;
* ``other``: only processes outside the run's tree listen on it (``owners`` names them);
* ``unknown``: it cannot be told: ``/proc/net`` is unreadable, the listener's process is not
  visible to this user (another user's process, a container's proxy), or the host did not
  answer. Callers then decide on other evidence (the run's own log).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from tunedeck.util.safety import visible

log = logging.getLogger(__name__)

FREE, OWN, OTHER, UNKNOWN = "free", "own", "other", "unknown"

# $1 port, $2 the run's session id or '', $3 the run id or ''.
# Prints NOPROC (no /proc/net/tcp), FREE, or "LISTEN <inodes>" then one
# "OWNER <pid> <mine 0|1> <comm>" line per process holding one of those sockets.
PORT_OWNER_SCRIPT = r"""port=$1 sid=$2 rid=$3
case $port in ''|*[!0-9]*) echo "ERR bad port"; exit 2;; esac
hex=$(printf '%04X' "$port")
inodes= seen=0
for f in /proc/net/tcp /proc/net/tcp6; do
  [ -r "$f" ] || continue
  seen=1
  inodes="$inodes $(awk -v p=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' "$f")"
done
[ "$seen" = 1 ] || { echo NOPROC; exit 0; }
set -- $inodes
[ $# -gt 0 ] || { echo FREE; exit 0; }
echo "LISTEN $*"
want=" $* "
ls -l /proc/[0-9]*/fd 2>/dev/null | awk -v want="$want" '
  /^\/proc\/[0-9]+\/fd:$/ { split($0, a, "/"); pid = a[3]; next }
  /-> socket:\[[0-9]+\]$/ { s = $NF; gsub(/[^0-9]/, "", s); if (index(want, " " s " ")) print pid }' | sort -u |
while read -r p; do
  st=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) || continue
  [ -n "$st" ] || continue
  set -- $st
  mine=0
  [ -n "$sid" ] && [ "$4" = "$sid" ] && mine=1
  [ -n "$rid" ] && grep -qszx "TUNEDECK_RUN_ID=$rid" "/proc/$p/environ" 2>/dev/null && mine=1
  comm=$(head -c 32 "/proc/$p/comm" 2>/dev/null | tr '\n\t' '  ')
  printf 'OWNER %s %s %s\n' "$p" "$mine" "$comm"
done
exit 0
"""


@dataclass(frozen=True)
class PortOwners:
    """Who listens on ``port`` (see the module's doc for ``state``)."""

    port: int
    state: str
    #: (pid, process name) of every listener this user can see (names are host text: shown
    #: through :func:`tunedeck.util.safety.visible`)
    owners: tuple[tuple[int, str], ...] = ()
    #: why the state is ``unknown``
    reason: str = ""
    #: something listens on the port (known even when its process is not visible)
    listening: bool = False

    def describe(self) -> str:
        """'pid 4242 (python3)', 'pid 1 (a), pid 2 (b)', or what is known of the listener."""
        if self.owners:
            return ", ".join(f"pid {p} ({visible(n) or '?'})" for p, n in self.owners)
        return self.reason or "a process not visible to this user"


def parse_port_owners(port: int, stdout: str) -> PortOwners:
    """The script's output as :class:`PortOwners`."""
    listening = False
    owners: list[tuple[int, str]] = []
    mine = False
    for line in stdout.splitlines():
        if line == "NOPROC":
            return PortOwners(port, UNKNOWN, reason="/proc/net/tcp is not readable there")
        if line == "FREE":
            return PortOwners(port, FREE)
        if line.startswith("LISTEN"):
            listening = True
        elif line.startswith("OWNER "):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1].isdigit():
                name = parts[3].strip() if len(parts) > 3 else ""
                if parts[2] == "1":
                    mine = True
                else:
                    owners.append((int(parts[1]), name))
    if not listening:
        return PortOwners(port, UNKNOWN, reason="no answer about the port")
    if mine:
        return PortOwners(port, OWN, listening=True)
    if owners:
        return PortOwners(port, OTHER, tuple(owners), listening=True)
    return PortOwners(port, UNKNOWN, reason="a process not visible to this user", listening=True)


async def port_owners(host: Any, port: int, *, session: int | None = None, run_id: str | None = None) -> PortOwners:
    """Who listens on ``port`` on ``host`` (any object with the Host's ``run_script``); with a
    run's ``session`` (its wrapper's pid) and ``run_id``, whether the listener is that run's."""
    args: Sequence[str] = [str(int(port)), str(int(session)) if session else "", run_id or ""]
    r = await host.run_script(PORT_OWNER_SCRIPT, args, timeout=20)
    if not r.ok:
        why = "connection lost" if r.lost else "timed out" if r.timed_out else (r.stderr.strip() or "failed")
        log.info("port %s owners: the check did not answer (%s)", port, visible(why))
        return PortOwners(int(port), UNKNOWN, reason=f"the port check did not answer ({visible(why)[:120]})")
    return parse_port_owners(int(port), r.stdout)


__all__ = ["FREE", "OTHER", "OWN", "PORT_OWNER_SCRIPT", "UNKNOWN", "PortOwners", "parse_port_owners", "port_owners"]
