"""What an A/B and a tuning campaign ask of the host they run on (:class:`ServerOps`: resolve a
profile, launch, wait until ready, benchmark, stop) and what it answers. :mod:`tunedeck.hostside.abops`
implements it next to the GPUs, :mod:`tunedeck.services.deployab` over multi-node deployments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from tunedeck.ab.journal import Journal
from tunedeck.ab.plan import Plan, PlanLevel
from tunedeck.util.records import pick


@dataclass(frozen=True)
class ProfileInfo:
    """What will run for one side: the profile resolved into a command."""

    name: str
    engine: str
    model: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    port: int
    served_model: str = ""  # the name the OpenAI API expects (defaults to model)

    def to_json(self) -> dict[str, Any]:
        """Everything the host needs to launch this side (``env`` holds the values, secrets too)."""
        return {
            **pick(self, "name", "engine", "model", "port", "served_model"),
            "argv": list(self.argv),
            "env": dict(self.env),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ProfileInfo":
        return cls(
            name=str(d["name"]),
            engine=str(d["engine"]),
            model=str(d["model"]),
            argv=tuple(str(a) for a in d["argv"]),
            env={str(k): str(v) for k, v in dict(d.get("env") or {}).items()},
            port=int(d["port"]),
            served_model=str(d.get("served_model") or ""),
        )


@dataclass(frozen=True)
class RunningServer:
    id: str
    description: str
    handle: Any = None
    #: the profile it was launched from (its run's meta), when known
    profile: str | None = None


@dataclass(frozen=True)
class LaunchHandle:
    run_id: str | None
    server_log: str | None
    url: str  # base URL reachable from this machine, e.g. http://127.0.0.1:30000
    handle: Any = None


@dataclass(frozen=True)
class ReadyResult:
    ready: bool
    startup_s: float | None = None
    diagnosis: str | None = None
    evidence: str | None = None  # the log line that proves the diagnosis
    timeline: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class StopResult:
    stopped: bool
    gpu_freed: bool | None  # None: could not check
    message: str = ""


@dataclass(frozen=True)
class LevelRequest:
    """One plan level to benchmark against a side's server (:meth:`ServerOps.bench`)."""

    plan: Plan
    level: PlanLevel
    #: what the level's results are labelled with (``ab_id``, ``side``, ``repeat``, ``profile``)
    labels: Mapping[str, str]
    #: told a line of progress and the fraction done (None: not known)
    on_progress: Callable[[str, float | None], None]


@dataclass(frozen=True)
class BenchResult:
    run_id: str | None
    summary: Mapping[str, Any]
    result_dir: str | None = None
    error: str | None = None


class ServerOps(Protocol):
    host_label: str

    async def resolve(self, profile: str) -> ProfileInfo: ...

    async def running_servers(self) -> list[RunningServer]: ...

    async def stop_running(self, server: RunningServer) -> StopResult: ...

    async def launch(self, info: ProfileInfo) -> LaunchHandle: ...

    async def wait_ready(
        self, info: ProfileInfo, handle: LaunchHandle, on_progress: Callable[[str, float | None], None]
    ) -> ReadyResult: ...

    async def flush_cache(self, info: ProfileInfo, handle: LaunchHandle) -> str: ...

    async def bench(self, info: ProfileInfo, handle: LaunchHandle, req: LevelRequest) -> BenchResult: ...

    async def acceptance_rate(self, info: ProfileInfo, handle: LaunchHandle) -> tuple[float | None, str | None]:
        """The speculative acceptance rate (%) for levels whose summary has none, and what it is
        (e.g. a gauge's span); (None, None) where the levels' own counters are the measurement."""
        ...

    async def stop(self, info: ProfileInfo, handle: LaunchHandle) -> StopResult: ...


# ------------------------------------------------------------------ the journal of what ran


def journal_launch(
    journal: Journal, handle: LaunchHandle, ready: ReadyResult, *, profile: str, host: str, ab_id: str, side: str
) -> None:
    """A launch and how its start-up went, in the journal (the next campaign's estimate reads it)."""
    journal.record_launch(
        handle.run_id,
        profile=profile,
        host=host,
        ready=ready.ready,
        startup_s=ready.startup_s,
        server_log=handle.server_log,
        timeline=[dict(t) for t in ready.timeline],
        diagnosis=ready.diagnosis,
        ab_id=ab_id,
        side=side,
    )
