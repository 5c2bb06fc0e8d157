"""A benchmark plan as data: the levels an A/B puts on each server (no file handling here,
so the host-side runtime can carry it; TOML files are read by :mod:`tunedeck.ab.plans`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from tunedeck.bench.workloads import WorkloadSpec
from tunedeck.util.records import pick


class PlanError(ValueError):
    """A plan that cannot be used; ``str()`` names the file, line and key."""

    def __init__(self, file: str, message: str, *, key: str | None = None, line: int | None = None):
        self.file = file
        self.key = key
        self.line = line
        where = file
        if line:
            where += f":{line}"
        if key:
            where += f": {key}"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class PlanLevel:
    """One benchmark at a fixed concurrency (closed loop) or request rate (capped by concurrency)."""

    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    warmup: int
    label: str = ""
    request_rate: float | None = None

    @property
    def title(self) -> str:
        return self.label or f"C={self.concurrency}"


@dataclass(frozen=True)
class Plan:
    name: str
    levels: tuple[PlanLevel, ...]
    endpoint: str = "completions"
    ignore_eos: bool = True
    temperature: float = 0.0
    seed: int = 1
    description: str = ""
    source: str = ""
    #: the ``[workload]`` table (random token ids when absent)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)

    @property
    def concurrencies(self) -> tuple[int, ...]:
        return tuple(lv.concurrency for lv in self.levels)

    @property
    def peak_concurrency(self) -> int:
        return max(self.concurrencies)

    @property
    def single_concurrency(self) -> int:
        return min(self.concurrencies)

    def to_dict(self) -> dict[str, Any]:
        return {
            **pick(self, "name", "description", "source", "endpoint", "ignore_eos", "temperature", "seed"),
            "workload": self.workload.to_json(),
            "levels": [
                pick(lv, "label", "concurrency", "num_prompts", "input_len", "output_len", "warmup", "request_rate")
                for lv in self.levels
            ],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Plan":
        """The inverse of :meth:`to_dict` (how a plan travels to the host)."""
        levels = tuple(
            PlanLevel(
                concurrency=int(lv["concurrency"]),
                num_prompts=int(lv["num_prompts"]),
                input_len=int(lv["input_len"]),
                output_len=int(lv["output_len"]),
                warmup=int(lv["warmup"]),
                label=str(lv.get("label") or ""),
                request_rate=None if lv.get("request_rate") is None else float(lv["request_rate"]),
            )
            for lv in d["levels"]
        )
        return cls(
            name=str(d["name"]),
            levels=levels,
            endpoint=str(d.get("endpoint") or "completions"),
            ignore_eos=bool(d.get("ignore_eos", True)),
            temperature=float(d.get("temperature") or 0.0),
            seed=int(d.get("seed") or 0),
            description=str(d.get("description") or ""),
            source=str(d.get("source") or ""),
            workload=WorkloadSpec.from_json(d.get("workload") or {}),
        )

    def warnings(self) -> list[str]:
        """Advice that does not stop a run (fewer than 5 x C prompts: not steady state)."""
        out = []
        for lv in self.levels:
            if lv.num_prompts < 5 * lv.concurrency:
                out.append(
                    f"plan {self.name}: level {lv.title} has {lv.num_prompts} prompts for "
                    f"concurrency {lv.concurrency} (< 5 x C: the run may not reach steady state)"
                )
        return out

    def scaled(self, *, num_prompts_factor: float | None = None) -> "Plan":
        if not num_prompts_factor:
            return self
        lv = tuple(replace(x, num_prompts=max(1, math.ceil(x.num_prompts * num_prompts_factor))) for x in self.levels)
        return replace(self, levels=lv)
