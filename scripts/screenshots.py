#!/usr/bin/env python3
"""Write the README screenshots (SVG) from the app running on deterministic fake data.

    python scripts/screenshots.py [--out screenshots/]

No terminal needed: each screen runs under ``App.run_test(size=(120, 36))``
and is saved with ``App.save_screenshot``. The scenes are the SVG snapshot
tests' (``tests/snapshot_app.py``): the same fixed data (fake collectors,
scripted progress lines, a recorded log), nothing is launched, and the
profile / results / state folders point at empty temporary directories,
so reruns write the same bytes. Add a screen by adding a scene there.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.snapshot_app import SCENES

SIZE = (120, 36)
#: the README shows these
SHOTS = ("status", "profiles", "launch-form", "run", "bench", "compare", "tune", "fleet", "deployment")


async def shoot(name: str, out: Path) -> Path:
    """Run scene ``name`` under ``run_test`` and save ``<name>.svg`` (title: tunedeck)."""
    app, run_before = SCENES[name]()
    async with app.run_test(size=SIZE) as pilot:
        await run_before(pilot)
        path = app.save_screenshot(filename=f"{name}.svg", path=str(out))
    return Path(path)


def _isolate() -> None:
    """Empty profile / results / state folders: only built-ins and the scripted data show."""
    import atexit
    import shutil

    tmp = Path(tempfile.mkdtemp(prefix="tunedeck-shots-"))
    atexit.register(shutil.rmtree, tmp, True)
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "TUNEDECK_HOME", "TUNEDECK_SIM_STATE"):
        os.environ[var] = str(tmp / var.lower())
    os.environ["TUNEDECK_PROFILES"] = str(tmp / "profiles")
    os.environ.pop("TUNEDECK_CONFIG", None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "screenshots")
    ap.add_argument("only", nargs="*", metavar="NAME", help=f"which screenshots: {', '.join(SHOTS)} (default: all)")
    args = ap.parse_args()
    unknown = [n for n in args.only if n not in SCENES]
    if unknown:
        ap.error(f"unknown screenshot {unknown[0]!r}; known: {', '.join(SHOTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    _isolate()
    for name in args.only or SHOTS:
        path = asyncio.run(shoot(name, args.out))
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
