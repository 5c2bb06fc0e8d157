"""The report of an A/B (:class:`ABReport`): both sides with what ran (secrets redacted) and their
measurements, the launches, the comparison and its warnings; read back from its JSON, or rebuilt
from a job folder when the A/B ended without writing one."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from tunedeck.ab.compare import Comparison, compare
from tunedeck.ab.ops import ProfileInfo
from tunedeck.ab.plan import Plan
from tunedeck.ab.render import to_dict
from tunedeck.ab.sides import LevelResult, Side, SideRun, side_from_dict, side_to_dict
from tunedeck.util.safety import redact_argv, redact_env

log = logging.getLogger(__name__)


@dataclass
class ABReport:
    """What an A/B produced (also after a failure or cancel)."""

    id: str
    a: str
    b: str
    plan: Plan
    host: str
    repeats: int
    interleave: bool
    #: running | completed | failed | cancelled | partial (no report written: rebuilt from the
    #: results in the job folder, :func:`report_from_results`)
    status: str = "running"
    error: str | None = None
    sides: dict[str, Side] = field(default_factory=dict)
    launches: list[dict[str, Any]] = field(default_factory=list)
    comparison: Comparison | None = None
    left_running: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "ab",
            "id": self.id,
            "status": self.status,
            "error": self.error,
            "host": self.host,
            "plan": self.plan.name,
            "plan_detail": self.plan.to_dict(),
            "repeats": self.repeats,
            "interleave": self.interleave,
            "a": side_to_dict(self.sides["A"]) if "A" in self.sides else {"profile": self.a},
            "b": side_to_dict(self.sides["B"]) if "B" in self.sides else {"profile": self.b},
            "launches": self.launches,
            "comparison": to_dict(self.comparison) if self.comparison else None,
            "left_running": self.left_running,
            "warnings": self.warnings,
        }


def report_from_dict(d: Mapping[str, Any], *, noise_pct: float | None = None) -> ABReport:
    """An :class:`ABReport` again from its :meth:`ABReport.to_dict` (an A/B that ran on a host);
    the comparison is recomputed from the sides, so it is the same code that judged it there."""
    plan = Plan.from_dict(d["plan_detail"])
    rep = ABReport(
        id=str(d["id"]),
        a=str((d.get("a") or {}).get("profile") or ""),
        b=str((d.get("b") or {}).get("profile") or ""),
        plan=plan,
        host=str(d.get("host") or ""),
        repeats=int(d.get("repeats") or 1),
        interleave=bool(d.get("interleave")),
        status=str(d.get("status") or "failed"),
        error=d.get("error") if isinstance(d.get("error"), str) else None,
        launches=list(d.get("launches") or []),
        left_running=[str(x) for x in d.get("left_running") or []],
        warnings=[str(x) for x in d.get("warnings") or []],
    )
    for key, label in (("a", "A"), ("b", "B")):
        side = d.get(key)
        if isinstance(side, Mapping) and "runs" in side:
            rep.sides[label] = side_from_dict(side)
    a, b = rep.sides.get("A"), rep.sides.get("B")
    if d.get("comparison") and a and b and a.runs and b.runs:
        rep.comparison = compare(a, b, **({"noise_pct": noise_pct} if noise_pct else {}))
    return rep


def side_of(label: str, info: ProfileInfo, plan: Plan, runs: Sequence[SideRun]) -> Side:
    """Side ``label`` of a report: what ran (secrets redacted), the plan's parameters, the runs
    that have a result."""
    return Side(
        label=label,
        profile=info.name,
        engine=info.engine,
        model=info.model,
        argv=tuple(redact_argv(info.argv)),  # the report, the journal and results: no secret
        env=redact_env(info.env),
        params={
            "endpoint": plan.endpoint,
            "ignore_eos": plan.ignore_eos,
            "temperature": plan.temperature,
            "seed": plan.seed,
            # the plan's workload (None: random token ids); the results name the one they ran
            "workload": plan.workload.to_json(),
            "levels": [
                {
                    "concurrency": lv.concurrency,
                    "input_len": lv.input_len,
                    "output_len": lv.output_len,
                    "num_prompts": lv.num_prompts,
                }
                for lv in plan.levels
            ],
        },
        runs=tuple(r for r in runs if r.levels),
    )


def report_from_results(
    spec: Mapping[str, Any],
    results: Sequence[tuple[Mapping[str, Any], str, Mapping[str, Any]]],
    *,
    status: str,
    error: str,
    noise_pct: float | None = None,
) -> ABReport:
    """The report of a campaign that ended without writing one (killed, died), rebuilt from what
    its job folder holds: the ``spec`` it was sent and its levels' ``results``, each (its
    ``meta.ab`` labels, run id, summary). The comparison is made when both sides have a result."""
    plan = Plan.from_dict(spec["plan"])
    infos = {"A": ProfileInfo.from_json(spec["a"]), "B": ProfileInfo.from_json(spec["b"])}
    rep = ABReport(
        id=str(spec["ab_id"]),
        a=infos["A"].name,
        b=infos["B"].name,
        plan=plan,
        host=str(spec.get("host_label") or ""),
        repeats=int(spec.get("repeats") or 1),
        interleave=bool(spec.get("interleave")),
        status=status,
        error=error,
    )
    order = {lv.concurrency: i for i, lv in enumerate(plan.levels)}
    runs: dict[tuple[str, str], list[LevelResult]] = {}
    for labels, run_id, summary in results:
        c = summary.get("max_concurrency")
        if labels.get("side") not in infos or not isinstance(c, int):
            continue
        runs.setdefault((str(labels["side"]), str(labels.get("repeat") or "1")), []).append(
            LevelResult(c, dict(summary), run_id)
        )
    for label, info in infos.items():
        side_runs = [
            SideRun(levels=tuple(sorted(lvs, key=lambda lv: order.get(lv.concurrency, len(order)))))
            for (side, _repeat), lvs in sorted(runs.items(), key=lambda kv: int(kv[0][1]) if kv[0][1].isdigit() else 0)
            if side == label
        ]
        rep.sides[label] = side_of(label, info, plan, side_runs)
    a, b = rep.sides["A"], rep.sides["B"]
    if a.runs and b.runs:
        try:
            rep.comparison = compare(a, b, **({"noise_pct": noise_pct} if noise_pct else {}))
        except Exception as e:
            log.exception("A/B %s: comparing the rebuilt sides failed", rep.id)
            rep.warnings.append(f"no comparison: {type(e).__name__}: {e}")
    return rep
