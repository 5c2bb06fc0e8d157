"""One import package, ``tunedeck``: pyproject.toml maps tui/ and widgets/ into it and names every
package (setuptools installs only the packages named, so one left out would be missing from the wheel
without a word). tests/integration/test_packaging.py builds the wheel itself."""

from __future__ import annotations

from pathlib import Path

import tomllib

from tests.conftest import REPO


def _config() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _packages_in_tree(package_dir: dict[str, str]) -> set[str]:
    """Every folder with an ``__init__.py`` under a mapped folder, by the dotted name it installs as;
    a mapped folder of data alone (no ``__init__.py``) is a package too."""
    found: set[str] = set()
    for pkg, folder in package_dir.items():
        root = REPO / folder
        if not (root / "__init__.py").is_file():
            found.add(pkg)
            continue
        for init in root.rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(".".join((pkg, *init.parent.relative_to(root).parts)))
    return found


def test_every_package_of_the_mapped_folders_is_named():
    cfg = _config()["tool"]["setuptools"]
    assert set(cfg["packages"]) == _packages_in_tree(cfg["package-dir"])
    assert len(cfg["packages"]) == len(set(cfg["packages"]))


def test_one_import_package_and_its_entry_point():
    cfg = _config()
    setuptools = cfg["tool"]["setuptools"]
    assert {p.split(".")[0] for p in setuptools["packages"]} == {"tunedeck"}
    assert setuptools["package-dir"]["tunedeck"] == "tui"
    assert setuptools["package-dir"]["tunedeck.widgets"] == "widgets"
    assert cfg["project"]["scripts"] == {"tunedeck": "tunedeck.cli:main"}
    assert cfg["tool"]["importlinter"]["root_packages"] == ["tunedeck"]


def test_the_widgets_are_a_subpackage_of_the_one_package():
    """Installed or editable, ``tunedeck.widgets`` resolves: from widgets/ in a checkout's editable
    install, from the package's own folder in a wheel's."""
    import tunedeck
    import tunedeck.widgets

    here = Path(tunedeck.widgets.__file__).resolve().parent
    assert here in (REPO / "widgets", Path(tunedeck.__file__).resolve().parent / "widgets")
    assert tunedeck.widgets.__name__ == "tunedeck.widgets"
