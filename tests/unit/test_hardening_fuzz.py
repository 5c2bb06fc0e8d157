"""A seeded subset of the hostile-profile fuzz (issue items 7 and 8): 0 injections, 0 tracebacks,
0 raw control characters in any output, 0 multi-line errors. The full run (1,000 hostile profiles
+ 400 malformed files) is ``scripts/fuzz_profiles.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile import fuzz


@pytest.mark.timeout(300)
def test_hostile_and_malformed_profiles_subset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEDECK_PROFILES", str(tmp_path / "p"))
    tally = fuzz(tmp_path / "p", hostile=60, malformed=40, seed=20261201)
    assert tally.runs == 2 + 3 * 100
    assert tally.clean, "\n".join(tally.examples)
