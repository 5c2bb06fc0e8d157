"""Write screenshots/compare.svg: the Compare screen after an A/B.

Uses the latest finished A/B in the tuning journal when there is one
(``--journal``), else the A/B recorded in ``screenshots/compare-ab.json``
(a journal entry of a demo run: ``tunedeck ab sglang-base sglang-tuned
--demo --plan quick``). Runs headless (``run_test``), no terminal needed.

    python scripts/screenshot_compare.py [--journal] [--out screenshots/compare.svg]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from textual.app import App

from tunedeck.ab.compare import compare
from tunedeck.ab.journal import Journal
from tunedeck.ab.sides import side_from_dict
from tunedeck.ui.screens.compare import CompareScreen

DATA = ROOT / "screenshots" / "compare-ab.json"


def load_entry(use_journal: bool) -> dict:
    if use_journal:
        ents = [e for e in Journal().entries("ab") if e.get("comparison")]
        if ents:
            return ents[-1]
    return json.loads(DATA.read_text())


class ShotApp(App):
    def __init__(self, screen: CompareScreen) -> None:
        super().__init__()
        self._scr = screen

    def on_mount(self) -> None:
        self.push_screen(self._scr)


async def shoot(out: Path, use_journal: bool = False, save_data: bool = False) -> Path:
    """Write the Compare screenshot to ``out`` (an .svg path); returns the path."""
    e = load_entry(use_journal)
    a, b = side_from_dict(e["a"]), side_from_dict(e["b"])
    cmp = compare(a, b)
    series = e.get("series")
    if not series:
        got = CompareScreen()._series_of(a, b)
        series = [list(got[0]), list(got[1])] if got else [[], []]
    if save_data:
        DATA.write_text(json.dumps({**e, "series": series}, indent=1) + "\n")
    scr = CompareScreen(
        start_campaign=no_campaign,
        profiles=[a.profile, b.profile, "sglang-eagle3", "vllm-baseline"],
        a=a.profile,
        b=b.profile,
        comparison=cmp,
        series=(series[0], series[1]),
    )
    app = ShotApp(scr)
    async with app.run_test(size=(120, 44)) as pilot:
        await pilot.pause(0.3)
        scr.query_one("#ab-status").update(
            f"A/B {e.get('id')} {e.get('status')} on {e.get('host')}, plan {e.get('plan')}"
        )
        await pilot.pause(0.3)
        app.save_screenshot(filename=out.name, path=str(out.parent))
    return out


async def no_campaign(*_args: object) -> None:
    raise RuntimeError("screenshots never start an A/B")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--journal", action="store_true")
    ap.add_argument(
        "--save-data",
        action="store_true",
        help="with --journal: also write the entry and its chart series to screenshots/compare-ab.json",
    )
    ap.add_argument("--out", default=str(ROOT / "screenshots" / "compare.svg"))
    args = ap.parse_args()
    await shoot(Path(args.out), args.journal, args.save_data)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
