"""The /24 claims that let namespaced clusters (tests/nshosts.py) run side by side: a claim held by a
live process is never handed out again, one whose owner is dead is taken over, and when every /24
is held the error names the claims folder."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import nshosts

pytestmark = pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2 (ip)")


@pytest.fixture
def slots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three /24s (10.214.240-242: above the ones real clusters take), claimed in a folder of the
    test's own."""
    monkeypatch.setattr(nshosts, "SLOTS", tmp_path / "claims")
    monkeypatch.setattr(nshosts, "OCTETS", range(240, 243))
    return tmp_path / "claims"


@pytest.fixture
def live_pid() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_claim_of_a_live_process_is_never_given_twice(slots: Path, live_pid: int) -> None:
    slots.mkdir()
    (slots / "240").write_text(f"{live_pid}\n")
    (slots / "242").write_text(f"{live_pid}\n")
    assert nshosts.claim_octet() == 241
    assert (slots / "241").read_text().strip() == str(os.getpid())
    # all three held now (one by this process): nothing is left, and the error says where to look
    with pytest.raises(RuntimeError, match=r"no free /24 in 10\.214\.240-242\.0: every one is claimed"):
        nshosts.claim_octet()


def test_a_claim_whose_owner_is_dead_is_taken_over(slots: Path, live_pid: int) -> None:
    slots.mkdir()
    (slots / "240").write_text(f"{live_pid}\n")
    (slots / "241").write_text(f"{live_pid}\n")
    (slots / "242").write_text(f"{dead_pid()}\n")
    assert nshosts.claim_octet() == 242
    assert (slots / "242").read_text().strip() == str(os.getpid())


def test_names_come_from_the_claim_and_two_clusters_never_share_one(slots: Path) -> None:
    a, b = nshosts.claim_octet(), nshosts.claim_octet()
    assert a != b
    assert nshosts.tag_of(a) != nshosts.tag_of(b)
    # interface names fit the kernel's 15 characters: tdvn2409s is the longest (host 9's veth)
    assert len(f"tdv{nshosts.tag_of(a)}9s") <= 15
