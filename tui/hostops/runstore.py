"""The local run records: ``state_dir()/runs/<run_id>.json`` (:class:`RunRecord`), written
*before* a launch, and the run ids and states they use."""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Generic, Mapping, Protocol, TypeVar

from tunedeck.util.files import atomic_write_json
from tunedeck.util.paths import state_dir
from tunedeck.util.safety import UnsafeInput

_log = logging.getLogger(__name__)

RUN_ID_RE = re.compile(r"^[0-9a-f]{6,32}$")
ENGINES = ("sglang", "vllm", "other")

#: statuses of a run record
LAUNCHING, STARTING, READY, FAILED, EXITED, STOPPING, STOPPED, STALE, UNKNOWN = (
    "launching",
    "starting",
    "ready",
    "failed",
    "exited",
    "stopping",
    "stopped",
    "stale",
    "unknown",
)
ENDED = frozenset({FAILED, EXITED, STOPPED, STALE})
#: a multi-node worker (it serves no HTTP) whose start-up ended: its head is ready and it lives
WORKER_UP = "up (worker)"


def new_run_id() -> str:
    """A local hex id that sorts by creation time: 8 hex digits of seconds + 4 random."""
    return f"{int(time.time()):08x}{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise UnsafeInput(f"run id {run_id!r}: expected 6-32 lowercase hex digits")
    return run_id


@dataclass
class RunRecord:
    """The local record of a run (JSON in ``state_dir()/runs/<run_id>.json``)."""

    run_id: str
    target: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # redacted
    engine: str = "other"
    port: int | None = None
    profile: str | None = None
    run_dir: str | None = None  # on the host, known after the launch script ran
    status: str = LAUNCHING
    created: float = 0.0
    started: float | None = None
    ended: float | None = None
    pid: int | None = None
    starttime: str | None = None
    rc: int | None = None
    log_offset: int = 0
    diagnosis: str | None = None
    proof: str | None = None
    timeline: list[dict[str, object]] = field(default_factory=list)
    gpu_pids: list[int] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> "RunRecord":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})  # type: ignore[arg-type]

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @property
    def record_id(self) -> str:
        return self.run_id

    @property
    def ended_(self) -> bool:
        return self.status in ENDED


class StoredRecord(Protocol):
    """What a :class:`RecordStore` keeps."""

    @property
    def record_id(self) -> str:
        """The id that names the record's file."""
        ...

    def to_json(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=StoredRecord)


class RecordStore(Generic[R]):
    """Local records of one kind: one JSON file each, ``<id>.json`` under :attr:`root` (the id a
    run id's form), written atomically and readable by the user alone; ``read`` makes a record
    of a file's JSON object (TypeError or ValueError when it is not one)."""

    def __init__(self, root: Path, read: Callable[[Mapping[str, Any]], R]) -> None:
        self.root = root
        self._from_json = read

    def path(self, record_id: str) -> Path:
        return self.root / f"{check_run_id(record_id)}.json"

    def save(self, rec: R) -> None:
        atomic_write_json(self.path(rec.record_id), rec.to_json(), mode=0o600)

    def load(self, record_id: str) -> R | None:
        """The record, or None: none stored, unreadable, or an id no record can have."""
        try:
            path = self.path(record_id)
        except ValueError:  # UnsafeInput: not an id's form, so no file of ours
            return None
        return self._read(path)

    def records(self) -> list[R]:
        """Every readable record, in the order of their files' names (an unreadable file is skipped)."""
        found = (self._read(p) for p in sorted(self.root.glob("*.json"))) if self.root.is_dir() else ()
        return [rec for rec in found if rec is not None]

    def _read(self, path: Path) -> R | None:
        try:
            return self._from_json(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


class RunStore(RecordStore[RunRecord]):
    """Local run records."""

    def __init__(self, root: Path | None = None) -> None:
        super().__init__(root or (state_dir() / "runs"), RunRecord.from_json)

    def all(self, target: str | None = None) -> list[RunRecord]:
        out = [rec for rec in self.records() if target is None or rec.target == target]
        out.sort(key=lambda r: (r.created, r.run_id))
        return out

    def delete(self, run_id: str) -> None:
        """Forget a record (a launch refused before anything ran)."""
        self.path(run_id).unlink(missing_ok=True)

    def update(self, run_id: str, **changes: object) -> RunRecord | None:
        rec = self.load(run_id)
        if rec is None:
            return None
        for k, v in changes.items():
            setattr(rec, k, v)
        self.save(rec)
        return rec
