"""A tuning campaign's pace: how long a candidate takes, and so how long the rest of a round takes.

A candidate takes its **start-up** (launch to ready), the search's **levels** (``C=1``, then up
to ``--max-steps - 1`` more) and its **stop** (from its last level to its end: the server
stopped, its GPU memory checked). Before anything ran, each part is a prior (:func:`prior`):

- the start-up: the journal's recorded start-ups of the candidates' profiles, else a default;
- a level: what the plan makes it: ``max(--min-prompts, --prompts-per-c x C)`` requests and the
  warmup, sent ``C`` at a time, so ``ceil(requests / C)`` waves, each one request long, a request
  taken at the SLO's bounds (the TTFT bound plus a TPOT, ITL or per-user speed bound per further
  output token, or the end-to-end bound), plus a fixed cost of the level itself. ``C=1`` runs
  ``--min-prompts`` waves, the others about ``--prompts-per-c``: two figures. An SLO that bounds
  no per-token time gives no such figure: a default;
- the levels: ``--max-steps`` in all (the search's most);
- the stop: a default.

As the campaign runs, the mean of each part as measured replaces its prior (:func:`measured`):
start-ups after the first ready, each kind of level after its first, the number of levels and the
stop after the first candidate's end. :func:`candidate_left_s` takes the part a candidate is in
(starting, a level, stopping) and its time so far; :func:`round_left_s` adds up a round.
Pure functions: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from tunedeck.ab.capacity import SloTerm, parse_slo
from tunedeck.ab.tune import Workload

#: a level's own cost beyond its requests: the client's workers start, the summary is written (s)
LEVEL_OVERHEAD_S = 1.0
#: a level when the SLO bounds no per-token time: an engine's, the simulator's (s)
DEFAULT_LEVEL_S = 60.0
DEFAULT_SIM_LEVEL_S = 10.0
#: stopping a server and checking its GPU memory: an engine, the simulator (s)
STOP_S = 15.0
SIM_STOP_S = 3.0


@dataclass(frozen=True)
class Pace:
    """How long each part of a candidate takes (seconds); ``levels``: levels after ``C=1``."""

    startup_s: float
    single_s: float
    level_s: float
    levels: float
    stop_s: float

    @property
    def candidate_s(self) -> float:
        """One candidate, launch to end."""
        return self.startup_s + self.single_s + self.levels * self.level_s + self.stop_s

    def to_json(self) -> dict[str, float]:
        return {
            "startup_s": round(self.startup_s, 3),
            "single_s": round(self.single_s, 3),
            "level_s": round(self.level_s, 3),
            "levels": round(self.levels, 3),
            "stop_s": round(self.stop_s, 3),
        }

    @classmethod
    def from_json(cls, d: object) -> "Pace | None":
        """A pace as :meth:`to_json` wrote it; None for anything else (an older campaign's)."""
        if not isinstance(d, Mapping):
            return None
        vals = [d.get(k) for k in ("startup_s", "single_s", "level_s", "levels", "stop_s")]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < math.inf for v in vals):
            return None
        return cls(*(float(v) for v in vals))  # type: ignore[arg-type]


def request_s(slo: Sequence[SloTerm | str], output_len: int) -> float | None:
    """One request at the SLO's bounds (s): the TTFT bound (0 without one) plus ``output_len - 1``
    token times (the TPOT or ITL bound, or one over the per-user tok/s), or the end-to-end bound
    when it is less; None when the SLO bounds neither a token time nor the whole request."""
    terms = [t if isinstance(t, SloTerm) else parse_slo([t])[0] for t in slo]
    ttft = min((t.bound / 1000.0 for t in terms if t.metric.startswith("ttft_")), default=0.0)
    token = min((t.bound / 1000.0 for t in terms if t.metric.startswith(("tpot_", "itl_"))), default=None)
    speed = [1.0 / t.bound for t in terms if t.metric == "per_user_tok_s"]
    if speed:
        token = min(speed[0], token) if token is not None else speed[0]
    whole = min((t.bound / 1000.0 for t in terms if t.metric.startswith("e2el_")), default=None)
    each = ttft + max(0, output_len - 1) * token if token is not None else None
    if whole is not None:
        each = whole if each is None else min(each, whole)
    return each


def level_s(workload: Workload, slo: Sequence[SloTerm | str], concurrency: int) -> float | None:
    """One level of the search at ``concurrency`` as the plan makes it (see the module docstring);
    None when the SLO gives no request time."""
    each = request_s(slo, workload.template.output_len)
    if each is None:
        return None
    lv = workload.level(concurrency)
    c = max(1, concurrency)
    waves = math.ceil(lv.num_prompts / c) + math.ceil(lv.warmup / c)
    return LEVEL_OVERHEAD_S + waves * each


def prior(
    workload: Workload | None,
    slo: Sequence[SloTerm | str],
    *,
    startup_s: float,
    max_steps: int,
    start: int,
    sim: bool,
) -> Pace:
    """A candidate's pace before anything ran: ``startup_s`` (the journal's, or a default), the
    levels from the plan (the later ones at the bracket's first concurrency, ``start``, at least
    2; a default without a workload or a request time), ``max_steps`` of them, and a default stop."""
    default = DEFAULT_SIM_LEVEL_S if sim else DEFAULT_LEVEL_S
    single = level_s(workload, slo, 1) if workload is not None else None
    later = level_s(workload, slo, max(2, start)) if workload is not None else None
    return Pace(
        startup_s,
        single if single is not None else default,
        later if later is not None else default,
        float(max(0, max_steps - 1)),
        SIM_STOP_S if sim else STOP_S,
    )


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def measured(
    before: Pace | None,
    *,
    startups: Sequence[float] = (),
    singles: Sequence[float] = (),
    levels: Sequence[float] = (),
    counts: Sequence[int] = (),
    stops: Sequence[float] = (),
) -> Pace | None:
    """``before`` with each part that was measured replaced by its mean: ``startups`` (launch to
    ready), ``singles`` (the ``C=1`` levels), ``levels`` (the later ones), ``counts`` (levels
    after ``C=1`` of each candidate that finished) and ``stops``. None while a part is neither
    known before nor measured."""
    got = [_mean(startups), _mean(singles), _mean(levels), _mean([float(c) for c in counts]), _mean(stops)]
    if got[3] == 0.0 and got[2] is None:
        got[2] = 0.0  # no candidate got past C=1: the later levels' length does not matter
    if before is not None:
        prev = (before.startup_s, before.single_s, before.level_s, before.levels, before.stop_s)
        got = [g if g is not None else p for g, p in zip(got, prev)]
    if any(g is None for g in got):
        return None
    return Pace(*(float(g) for g in got))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Doing:
    """Where a candidate is (times in seconds on one clock): launched at ``launched``, ready at
    ``ready``, ``levels_done`` levels finished (``C=1`` included), the one running now since
    ``level_since``, stopping since ``stop_since``."""

    launched: float
    ready: float | None = None
    levels_done: int = 0
    level_since: float | None = None
    stop_since: float | None = None


def candidate_left_s(pace: Pace, doing: Doing | None, now: float) -> float:
    """What is left of a candidate (``doing`` None: not launched yet): the parts still to come at
    ``pace``, the part it is in less its time so far (never below 0)."""
    if doing is None:
        return pace.candidate_s
    if doing.stop_since is not None:
        return max(0.0, pace.stop_s - (now - doing.stop_since))
    if doing.ready is None:
        return max(0.0, pace.startup_s - (now - doing.launched)) + pace.candidate_s - pace.startup_s
    k = doing.levels_done
    if doing.level_since is not None:  # a level runs: C=1 when none finished yet
        this = pace.single_s if k == 0 else pace.level_s
        return max(0.0, this - (now - doing.level_since)) + max(0.0, pace.levels - k) * pace.level_s + pace.stop_s
    if k == 0:
        return pace.single_s + pace.levels * pace.level_s + pace.stop_s
    return max(0.0, pace.levels - (k - 1)) * pace.level_s + pace.stop_s


def round_left_s(pace: Pace, doing: Iterable[Doing | None], now: float) -> float:
    """The rest of a round: each candidate still to finish in it (None: not launched yet)."""
    return sum(candidate_left_s(pace, d, now) for d in doing)


__all__ = [
    "DEFAULT_LEVEL_S",
    "DEFAULT_SIM_LEVEL_S",
    "LEVEL_OVERHEAD_S",
    "SIM_STOP_S",
    "STOP_S",
    "Doing",
    "Pace",
    "candidate_left_s",
    "level_s",
    "measured",
    "prior",
    "request_s",
    "round_left_s",
]
