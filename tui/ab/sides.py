"""The two sides of a comparison: each one or more repeats of benchmark levels (``vllm bench serve``
key names) plus what was run; read from summaries and (de)serialised."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from tunedeck.util.records import pick
from tunedeck.util.safety import redact_env

#: ``client.where`` of a result whose client reached the server through an SSH port forward
VIA_SSH = "local-via-ssh"


@dataclass(frozen=True)
class LevelResult:
    """One benchmark at one concurrency: a summary in vLLM key names."""

    concurrency: int
    summary: Mapping[str, Any]
    run_id: str | None = None


@dataclass(frozen=True)
class SideRun:
    """One repeat of one side: one server launch and its benchmarks."""

    levels: tuple[LevelResult, ...] = ()
    startup_s: float | None = None
    launch_run_id: str | None = None
    server_log: str | None = None
    acceptance_rate: float | None = None  # read from /metrics after the run when the summaries lack it
    #: what :attr:`acceptance_rate` is when it is not counted per level (a gauge and its span)
    acceptance_note: str | None = None

    def level(self, concurrency: int) -> LevelResult | None:
        for lv in self.levels:
            if lv.concurrency == concurrency:
                return lv
        return None


@dataclass(frozen=True)
class Side:
    """Everything known about A or B."""

    label: str  # "A" or "B"
    profile: str
    engine: str = ""
    model: str = ""
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    #: endpoint, ignore_eos, temperature, and per level input_len/output_len/num_prompts
    params: Mapping[str, Any] = field(default_factory=dict)
    runs: tuple[SideRun, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.label} ({self.profile})" if self.profile else self.label

    def concurrencies(self) -> list[int]:
        cs: set[int] = set()
        for r in self.runs:
            cs.update(lv.concurrency for lv in r.levels)
        return sorted(cs)


def summary_number(summary: Mapping[str, Any] | None, key: str) -> float | None:
    """A finite number from a level's summary, or None."""
    if not summary:
        return None
    v = summary.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def summaries_to_levels(obj: Any, run_id: str | None = None) -> list[LevelResult]:
    """Accept the shapes a benchmark result comes in and give one LevelResult per concurrency.

    A single summary (``max_concurrency`` names its level), a list of them, or
    a sweep object holding them under ``levels``/``results``/``runs``/``sweep``.
    """
    if obj is None:
        return []
    if isinstance(obj, Mapping):
        for key in ("levels", "results", "runs", "sweep", "summaries"):
            inner = obj.get(key)
            if isinstance(inner, list) and inner and all(isinstance(x, Mapping) for x in inner):
                return summaries_to_levels(inner, run_id)
            if isinstance(inner, Mapping) and inner and all(isinstance(x, Mapping) for x in inner.values()):
                return summaries_to_levels(list(inner.values()), run_id)
        c = obj.get("max_concurrency", obj.get("concurrency"))
        if isinstance(c, (int, float)) and not isinstance(c, bool):
            return [LevelResult(int(c), obj, run_id or obj.get("run_id"))]
        return [LevelResult(0, obj, run_id or obj.get("run_id"))]
    if isinstance(obj, (list, tuple)):
        out: list[LevelResult] = []
        for x in obj:
            out.extend(summaries_to_levels(x, run_id))
        return out
    return []


def side_to_dict(side: Side) -> dict[str, Any]:
    return {
        **pick(side, "label", "profile", "engine", "model"),
        "argv": list(side.argv),
        "env": redact_env(dict(side.env)),
        "params": dict(side.params),
        "runs": [
            {
                **pick(r, "startup_s", "launch_run_id", "server_log", "acceptance_rate", "acceptance_note"),
                "levels": [
                    {"concurrency": lv.concurrency, "run_id": lv.run_id, "summary": dict(lv.summary)} for lv in r.levels
                ],
            }
            for r in side.runs
        ],
    }


def side_from_dict(d: Mapping[str, Any]) -> Side:
    runs = []
    for r in d.get("runs") or ():
        levels = tuple(
            LevelResult(int(lv["concurrency"]), dict(lv.get("summary") or {}), lv.get("run_id"))
            for lv in r.get("levels") or ()
        )
        runs.append(
            SideRun(
                levels=levels,
                startup_s=r.get("startup_s"),
                launch_run_id=r.get("launch_run_id"),
                server_log=r.get("server_log"),
                acceptance_rate=r.get("acceptance_rate"),
                acceptance_note=r.get("acceptance_note"),
            )
        )
    return Side(
        label=str(d.get("label", "?")),
        profile=str(d.get("profile", "")),
        engine=str(d.get("engine", "")),
        model=str(d.get("model", "")),
        argv=tuple(d.get("argv") or ()),
        env=dict(d.get("env") or {}),
        params=dict(d.get("params") or {}),
        runs=tuple(runs),
    )
