"""Bounded per-GPU history of utilization and memory (for sparklines).

Every buffer is a ``deque(maxlen=…)`` and the number of GPUs tracked is
capped, so memory stays constant however long the dashboard runs. NA
samples are kept as NA (a gap), never as 0.
"""

from __future__ import annotations

import collections
from typing import Deque

from tunedeck.model import NA, GpuStatus, Num


class GpuHistory:
    """``add(status)`` after each block; ``util(i)`` / ``memory(i)`` give the recent values."""

    def __init__(self, maxlen: int = 120, max_gpus: int = 64) -> None:
        self.maxlen = maxlen
        self.max_gpus = max_gpus
        self._util: dict[int, Deque[Num]] = {}
        self._mem: dict[int, Deque[Num]] = {}

    def add(self, status: GpuStatus) -> None:
        """Append one sample per GPU of an ``ok`` status; other states are skipped."""
        if status.state != "ok":
            return
        seen = set()
        for g in status.gpus:
            seen.add(g.index)
            if g.index not in self._util:
                if len(self._util) >= self.max_gpus:
                    continue
                self._util[g.index] = collections.deque(maxlen=self.maxlen)
                self._mem[g.index] = collections.deque(maxlen=self.maxlen)
            self._util[g.index].append(g.utilization)
            self._mem[g.index].append(memory_percent(g.memory_used, g.memory_total))
        for gone in [i for i in self._util if i not in seen]:
            # a GPU that vanished from the output: a gap, then forgotten once all gaps
            dq = self._util[gone]
            dq.append(NA)
            self._mem[gone].append(NA)
            if all(v is NA for v in dq):
                del self._util[gone], self._mem[gone]

    def util(self, index: int) -> tuple[Num, ...]:
        return tuple(self._util.get(index, ()))

    def memory(self, index: int) -> tuple[Num, ...]:
        """Memory used in percent of total."""
        return tuple(self._mem.get(index, ()))

    def indices(self) -> tuple[int, ...]:
        return tuple(sorted(self._util))

    def clear(self) -> None:
        self._util.clear()
        self._mem.clear()


def memory_percent(used: Num, total: Num) -> Num:
    if isinstance(used, (int, float)) and isinstance(total, (int, float)) and total > 0:
        return 100.0 * used / total
    return NA
