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
import time
from typing import Callable

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


class LinkWatch:
    """Whether a followed stream's link is lost right now, for a view to say so.

    A follower tells :meth:`lost` on each failed attempt (``follow_forever``'s ``on_error``,
    a job follower's ``on_link_error``) and :meth:`ok` once the host answers again (its
    ``on_resume`` / ``on_link_ok``). Only those two change it: silence in the followed file is
    never a lost link, so a view that shows this state raises no false alarm.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        #: ``clock()`` when the link was first reported lost; None while it is up
        self.since: float | None = None
        #: the last failure's text
        self.reason = ""
        #: failed attempts since the loss
        self.attempts = 0

    @property
    def is_lost(self) -> bool:
        return self.since is not None

    def lost(self, e: BaseException | str) -> bool:
        """A failed attempt; True when it starts a loss (the link was up until now)."""
        first = self.since is None
        if first:
            self.since = self.clock()
        self.reason = str(e)
        self.attempts += 1
        return first

    def ok(self) -> float | None:
        """The host answers again: how long the loss lasted (s), or None when there was none."""
        if self.since is None:
            return None
        lasted = self.clock() - self.since
        self.since, self.reason, self.attempts = None, "", 0
        return lasted

    def tell(self, error: str | None) -> bool:
        """A follower's word: ``error`` (a failed attempt) or None (the host answers again); True
        when it starts or ends a loss, i.e. when a view that shows the link has a new line to show."""
        if error is None:
            return self.ok() is not None
        return self.lost(error)

    def lost_for(self) -> float:
        """Seconds since the loss was reported (0 while the link is up)."""
        return 0.0 if self.since is None else max(0.0, self.clock() - self.since)
