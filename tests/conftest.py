"""Shared fixtures. Every test gets its own XDG dirs so nothing touches the user's files."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TUNEDECK_SHARED", REPO.parent / "shared"))
REAL_LOGS = SHARED / "data" / "real-logs"
ENGINE_HELP = SHARED / "data" / "engine-help"


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    base = tmp_path_factory.mktemp("xdg")
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        d = base / var.lower()
        d.mkdir()
        monkeypatch.setenv(var, str(d))
    monkeypatch.setenv("TUNEDECK_HOME", str(base / "remote-home"))
    monkeypatch.setenv("TUNEDECK_SIM_STATE", str(base / "sim-state"))
    monkeypatch.delenv("TUNEDECK_CONFIG", raising=False)
    return base


@pytest.fixture(autouse=True)
def _no_remembered_ssh_refusals() -> None:
    """A host-key / auth refusal is remembered per endpoint for the process (no retries until
    the user acts); tests share one sshd endpoint, so each starts with a clean slate."""
    blocked = getattr(sys.modules.get("tunedeck.hostops.sshgate"), "_BLOCKED", None)
    if blocked is not None:
        blocked.clear()


def _shared(path: Path, what: str) -> Path:
    """A folder of the shared reference data: skipped outside CI when missing, a failure in CI."""
    if not path.is_dir():
        msg = f"{what} missing: {path} (set TUNEDECK_SHARED to the shared folder)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@pytest.fixture
def real_logs() -> Path:
    return _shared(REAL_LOGS, "reference logs")


@pytest.fixture
def engine_help() -> Path:
    """The releases' real ``--help`` texts (INDEX.md names them)."""
    return _shared(ENGINE_HELP, "engine help texts")


def tunedeck_cmd() -> list[str]:
    """How tests invoke the CLI as a subprocess (works without an installed script)."""
    return [sys.executable, "-m", "tunedeck"]


TIERS = ("unit", "ui", "integration")


#: how many namespaced-host tests run at once (one per ``xdist_group``): each runs a cluster of
#: sshd's and simulators, and a vLLM-on-Ray test a real Ray cluster; four at once on 2 cores
#: stretched a bounded stop past its bound (28.5 s for 25), two at once held
NETNS_GROUPS = 2


def _bound(item: pytest.Item) -> float:
    """The test's ``timeout`` mark (0 without one): a test's bound grows with its length."""
    mark = item.get_closest_marker("timeout")
    return float(mark.args[0]) if mark is not None and mark.args else 0.0


def _netns(item: pytest.Item) -> bool:
    return "ns_hosts" in getattr(item, "fixturenames", ())


def _rank(item: pytest.Item) -> tuple[int, float]:
    """Where a test goes in the run, longest first: the namespaced clusters and the ``slow`` scenarios
    (30 s to minutes each), the rest of integration (seconds each), ui, then unit (milliseconds), so
    that no worker starts a minute-long test while the others run out of work. Within each, the
    larger its ``timeout`` mark, the earlier."""
    tier = next((t for t in TIERS if item.get_closest_marker(t) is not None), "unit")
    if tier == "integration":
        heavy = _netns(item) or item.get_closest_marker("slow") is not None
        return (0 if heavy else 1), -_bound(item)
    return (2 if tier == "ui" else 3), -_bound(item)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier (the folder it lives in) and order the run longest first.

    Under ``pytest-xdist --dist loadgroup`` a test is a unit of work of its own, handed out in this
    order to the worker that runs out first: the heavy integration tests go first (``_rank``), the
    unit tests fill the end. The namespaced-host tests (tests/nshosts.py) form ``NETNS_GROUPS``
    groups, balanced by their timeout marks: a group runs on one worker, one test at a time, and the
    groups run side by side from the start (xdist hands out the largest units first). Clusters never
    collide: each claims a /24 of its own and takes its link and namespace names from it, and its
    Ray nodes have temp dirs of their own. sshd instances, the simulator and fake servers take free
    ports and private folders.

    A test marked ``long`` (minutes of one scenario, e.g. the 150-s DROP) runs only when ``-m``
    names it (``./scripts/test integration -m long``); otherwise it is deselected.
    """
    if "long" not in (config.getoption("markexpr") or ""):
        long = [item for item in items if item.get_closest_marker("long") is not None]
        if long:
            config.hook.pytest_deselected(items=long)
            items[:] = [item for item in items if item.get_closest_marker("long") is None]
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO / "tests").parts
        if parts and parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))
    items.sort(key=_rank)  # stable: file order among equals, the same on every worker
    load = [0.0] * NETNS_GROUPS
    for item in filter(_netns, items):  # longest first, each to the lightest group
        k = load.index(min(load))
        load[k] += _bound(item) or 1.0
        item.add_marker(pytest.mark.xdist_group(f"netns{k}"))


@pytest.fixture
def started() -> Iterator[list[int]]:
    """Wrapper pids started by a test (each leads its own session): killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
