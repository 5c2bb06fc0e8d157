#!/usr/bin/env python3
"""The full hostile-profile fuzz: 1,000 hostile profiles + 400 malformed TOML files, each run
through ``profiles show``, ``profiles check`` and ``profiles command`` (plus ``profiles list``
over all of them), in-process. Prints the counts; exits 1 unless there are 0 injections,
0 tracebacks, 0 raw control characters in any output and 0 multi-line errors.

    .venv/bin/python scripts/fuzz_profiles.py [--seed N] [--hostile 1000] [--malformed 400]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.hostile import fuzz


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hostile", type=int, default=1000)
    ap.add_argument("--malformed", type=int, default=400)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tunedeck-fuzz-") as d:
        for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
            os.environ[var] = os.path.join(d, var.lower())
        t0 = time.monotonic()
        t = fuzz(Path(d) / "profiles", hostile=a.hostile, malformed=a.malformed, seed=a.seed)
        took = time.monotonic() - t0
    print(f"files: {a.hostile} hostile + {a.malformed} malformed (seed {a.seed}); command runs: {t.runs}; {took:.0f} s")
    print(
        f"injections: {t.injections}  tracebacks: {t.tracebacks}  raw control characters: {t.raw_controls}  "
        f"multi-line errors: {t.multi_line_errors}"
    )
    for e in t.examples:
        print("  " + e)
    return 0 if t.clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
