"""The progress events of an A/B and of a tuning campaign (:class:`ABEvent`): made where it runs,
carried from the host as JSON lines, shown by the command line and the screens."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class ABEvent:
    """One progress event. ``kind`` is one of:

    ``start``, ``confirm``, ``stop-existing``, ``launch``, ``progress`` (startup
    phase, ``fraction`` 0-1), ``ready``, ``failed``, ``flush``, ``warmup``,
    ``bench-start``, ``bench-progress``, ``bench-done``, ``stop``,
    ``gpu-freed``, ``side-done``, ``comparison``, ``cancelled``, ``error``,
    ``done``, ``info``.
    """

    kind: str
    message: str
    side: str | None = None
    repeat: int | None = None
    step: int = 0
    steps: int = 0
    fraction: float | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        """Every field by its name (``data`` as a plain dict), after ``"type": "ab"``."""
        out: dict[str, Any] = {"type": "ab"}
        out.update((f.name, getattr(self, f.name)) for f in fields(self))
        out["data"] = dict(self.data)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ABEvent":
        """The inverse of :meth:`to_json` (events travel from the host as JSON lines)."""
        frac = d.get("fraction")
        rep = d.get("repeat")
        data = d.get("data")
        return cls(
            kind=str(d.get("kind") or "info"),
            message=str(d.get("message") or ""),
            side=d.get("side") if isinstance(d.get("side"), str) else None,
            repeat=rep if isinstance(rep, int) else None,
            step=int(d.get("step") or 0),
            steps=int(d.get("steps") or 0),
            fraction=float(frac) if isinstance(frac, (int, float)) else None,
            data=dict(data) if isinstance(data, Mapping) else {},
            time=float(d.get("time") or time.time()),
        )

    def line(self) -> str:
        where = ""
        if self.side:
            where = f"[{self.side}{'' if self.repeat is None else ' #' + str(self.repeat + 1)}] "
        frac = f" {self.fraction * 100:3.0f}%" if self.fraction is not None and self.kind == "progress" else ""
        return f"{where}{self.message}{frac}"


EventFn = Callable[[ABEvent], Any]
