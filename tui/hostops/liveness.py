"""One liveness rule for every long-lived stream from a host.

A stream that stays open for minutes (a followed log or events file, the sampler) is only
known to be alive while something arrives on it. A quiet stream is not a dead one, so
silence alone proves nothing unless the host side speaks at a known rate:

* the host side writes a heartbeat every :func:`interval` seconds (for a followed file: one
  byte on stderr, so the followed bytes on stdout stay exact);
* the laptop writes a heartbeat (a newline on the command's stdin) at the same interval;
* either side that hears nothing for ``MISSED_BEATS`` intervals (:func:`dead_after`) takes
  the other as gone: the laptop reports the link lost and reconnects (resuming at the
  consumed offset), the host side ends every process it started for that stream.

``TUNEDECK_HEARTBEAT_S`` sets the interval (tests make it small); the default is 5 s, so a
dead link is reported within 15 s (plus up to one idle tick of the follower, 1 s).
"""

from __future__ import annotations

import math
import os

#: the variable that sets the heartbeat interval in seconds
ENV = "TUNEDECK_HEARTBEAT_S"
#: seconds between two heartbeats, both ways
HEARTBEAT_S = 5.0
#: intervals without a heartbeat after which a side takes the other as gone
MISSED_BEATS = 3


class LivenessConfigError(ValueError):
    """A heartbeat interval that is not a positive number of seconds."""


def interval() -> float:
    """The heartbeat interval: ``TUNEDECK_HEARTBEAT_S`` if set, else :data:`HEARTBEAT_S`."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return HEARTBEAT_S
    try:
        v = float(raw)
    except ValueError:
        raise LivenessConfigError(f"{ENV}={raw!r}: expected a number of seconds (e.g. 5)") from None
    if not math.isfinite(v) or not 0.05 <= v <= 600:
        raise LivenessConfigError(f"{ENV}={raw!r}: expected seconds between 0.05 and 600")
    return v


def dead_after(beat: float | None = None) -> float:
    """Seconds of silence after which a link is dead: ``MISSED_BEATS`` heartbeat intervals."""
    return (interval() if beat is None else beat) * MISSED_BEATS
