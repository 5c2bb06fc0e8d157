"""SVG snapshots of every screen at 80×24 and 160×48 (fixed data, fixed clocks, nothing live).

A layout glitch, a dropped column or a stray character changes the SVG and fails here.
Update deliberately: ``pytest tests/ui/test_ui_snapshots.py --snapshot-update`` and review
``snapshot_report.html``. The same scenes write the README screenshots (scripts/screenshots.py).
"""

from __future__ import annotations

import pytest

from tests.snapshot_app import SCENES

pytestmark = pytest.mark.timeout(120)

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("scene", list(SCENES))
def test_screen(scene: str, size: str, snap_compare) -> None:
    app, run_before = SCENES[scene]()
    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)
