#!/usr/bin/env python3
"""Lay out the ``tunedeck`` package as the wheel installs it, in symlinks: build/pkgview/tunedeck.

The repository keeps tui/ and widgets/ apart and pyproject.toml maps them into one import package
(``[tool.setuptools] package-dir``: tui/ is ``tunedeck``, widgets/ is ``tunedeck.widgets``). Tools
that name modules by their folders (mypy) or find a package by its folder on sys.path
(import-linter) read this view instead: a folder per mapped package, and in it a link to every file
and folder of the mapped one. It is rebuilt on every call (./scripts/test check calls it) and is
nothing but links, so an edit in tui/ or widgets/ is what the tools read. Prints the view's root.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
VIEW = REPO / "build" / "pkgview"


def mapping(pyproject: Path) -> dict[str, Path]:
    """The mapped packages that hold code (a folder with ``__init__.py``), by dotted name."""
    cfg = tomllib.loads(pyproject.read_text())
    dirs = cfg["tool"]["setuptools"]["package-dir"]
    return {pkg: REPO / d for pkg, d in dirs.items() if (REPO / d / "__init__.py").is_file()}


def build(view: Path, packages: dict[str, Path]) -> None:
    tmp = view.with_name(f"{view.name}.{os.getpid()}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    for pkg in sorted(packages, key=lambda p: p.count(".")):  # parents first
        src = packages[pkg]
        dest = tmp / pkg.replace(".", "/")
        dest.mkdir(parents=True, exist_ok=True)
        inner = {
            p.rsplit(".", 1)[1] for p in packages if p.startswith(pkg + ".") and p.count(".") == pkg.count(".") + 1
        }
        for entry in sorted(src.iterdir()):
            if entry.name == "__pycache__" or entry.name in inner:
                continue
            (dest / entry.name).symlink_to(os.path.relpath(entry, dest))
    if view.exists():
        shutil.rmtree(view)
    tmp.rename(view)


def main() -> int:
    packages = mapping(REPO / "pyproject.toml")
    if not packages:
        print(
            f"pkgview: no package with code in [tool.setuptools] package-dir of {REPO / 'pyproject.toml'}",
            file=sys.stderr,
        )
        return 2
    build(VIEW, packages)
    print(VIEW)
    return 0


if __name__ == "__main__":
    sys.exit(main())
