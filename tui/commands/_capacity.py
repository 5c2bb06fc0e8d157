"""``tunedeck bench --capacity --slo …``: the highest concurrency whose level meets an SLO,
searched with one closed-loop level of the benchmark per step (:mod:`tunedeck.ab.capacity`), each step
and the result told as it goes."""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable

from tunedeck.bench.plan import BenchPlan
from tunedeck.commands._argtypes import pos_int
from tunedeck.commands._benchout import human


def add_capacity_options(p: argparse.ArgumentParser) -> None:
    """``--capacity``, ``--slo`` and the search's bounds."""
    k = p.add_argument_group("capacity at an SLO (with --url)")
    k.add_argument(
        "--capacity",
        action="store_true",
        help="find the highest concurrency whose level meets --slo: C=1 (the single-user speed), then "
        "doubling, then bisection to within 10%%, one level per step, each saved as usual; --json writes "
        "the search (capacity, single_user_tok_s, throughput_at_capacity, steps, closest)",
    )
    k.add_argument(
        "--slo",
        nargs="+",
        default=[],
        metavar="METRIC:BOUND",
        help="the SLO of --capacity: ttft_p50|p90|p99, tpot_p50|p90|p99, itl_p90|p99, e2el_p90|p99 (at most MS) "
        "and per_user_tok_s (at least N), e.g. ttft_p90:500 tpot_p90:50",
    )
    k.add_argument(
        "--capacity-max", type=pos_int, default=1024, metavar="C", help="highest concurrency tried (default 1024)"
    )
    k.add_argument("--capacity-steps", type=pos_int, default=8, metavar="N", help="levels measured at most (default 8)")


async def search_capacity(plan: BenchPlan, cfg: Any, slo: Any, run: Callable[[Any], Any]) -> Any:
    """:func:`tunedeck.ab.capacity.find_capacity` with one closed-loop level of ``cfg`` per step (``run``
    benchmarks a config and returns its summaries); each step and the result are printed."""
    import dataclasses

    from tunedeck.ab.capacity import find_capacity

    out = human(plan)

    async def measure(c: int) -> Any:
        [summary] = await run(dataclasses.replace(cfg, concurrency=[c], request_rate=[math.inf]))
        return summary

    def on_step(s: Any) -> None:
        said = "meets the SLO" if s.met else "misses the SLO: " + "; ".join(s.reasons)
        print(f"capacity step C={s.concurrency}: {said}", file=out, flush=True)

    r = await find_capacity(
        measure, slo, max_concurrency=plan.capacity_max, max_steps=plan.capacity_steps, on_step=on_step
    )
    terms = " ".join(str(t) for t in slo)
    single = f"{r.single_user_tok_s:.1f} tok/s" if r.single_user_tok_s is not None else "N/A"
    if r.capacity is not None:
        tput = f"{r.throughput_at_capacity:.1f}" if r.throughput_at_capacity is not None else "N/A"
        print(
            f"capacity at {terms}: {r.capacity} concurrent users, {tput} output tok/s; single user {single}",
            file=out,
        )
    else:
        why = "; ".join(r.closest.reasons) if r.closest is not None else "nothing measured"
        print(f"capacity at {terms}: none (not even 1 user; single user {single}): {why}", file=out)
    return r
