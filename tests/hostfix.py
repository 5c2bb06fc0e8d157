"""Helpers for host-side runtime tests: Pythons on this machine, a fake ``python3``."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from pathlib import Path


def pythons() -> list[tuple[tuple[int, int], str]]:
    """(version, path) of every CPython 3.9+ this machine offers, oldest first."""
    cands: set[str] = set()
    for name in ("python3", *(f"python3.{m}" for m in range(9, 15))):
        p = shutil.which(name)
        if p:
            cands.add(os.path.realpath(p))
    for pat in (
        "/usr/bin/python3.*",
        "/usr/local/bin/python3.*",
        "/root/.pyenv/versions/3.*/bin/python3.*",
        "/opt/python/*/bin/python3*",
    ):
        cands.update(p for p in glob.glob(pat) if re.search(r"python3\.\d+$", p))
    out = []
    for p in sorted(cands):
        try:
            v = subprocess.run(
                [p, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, timeout=20
            ).stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if len(v) == 2 and (int(v[0]), int(v[1])) >= (3, 9):
            out.append(((int(v[0]), int(v[1])), p))
    return sorted(set(out))


def fake_python(folder: Path, script: str) -> Path:
    """A ``python3`` that runs ``script`` (sh) instead: a host with a broken or too-old Python."""
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "python3"
    p.write_text("#!/bin/sh\n" + script)
    p.chmod(0o755)
    return p
