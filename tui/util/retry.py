"""The one retry policy: exponential backoff, capped, with optional jitter.

Every loop that retries (SSH connects, log followers, the GPU stream, the host sampler
on both ends, the dashboard's collectors) takes its delays from here:
:func:`delay` for a numbered attempt, :class:`Backoff` for a loop that resets after a
success. Jitter: ``equal`` (half fixed, half random: a countdown never reads 0 s and
many dashboards don't reconnect in lockstep), ``full`` (0..d, as for SSH handshakes)
or ``none``. Standard library only, Python >= 3.9 (it ships in the host runtime).
"""

from __future__ import annotations

import random

JITTERS = ("equal", "full", "none")


def delay(attempt: int, *, base: float = 1.0, cap: float = 60.0, jitter: str = "equal") -> float:
    """Seconds to wait before retry ``attempt`` (1-based): ``base * 2**(attempt-1)``, at most ``cap``."""
    if jitter not in JITTERS:
        raise ValueError(f"jitter {jitter!r}: expected one of {', '.join(JITTERS)}")
    d = min(cap, base * 2 ** max(0, attempt - 1))
    if jitter == "none":
        return float(d)
    if jitter == "full":
        return float(random.uniform(0, d))
    return float(d / 2 + random.uniform(0, d / 2))


class Backoff:
    """Delays for one retry loop: :meth:`next` after a failure, :meth:`reset` after a success."""

    def __init__(self, base: float = 1.0, cap: float = 30.0, *, jitter: str = "none") -> None:
        self.base, self.cap, self.jitter = base, cap, jitter
        self.attempt = 0

    def next(self) -> float:
        self.attempt += 1
        return delay(self.attempt, base=self.base, cap=self.cap, jitter=self.jitter)

    def reset(self) -> None:
        self.attempt = 0
