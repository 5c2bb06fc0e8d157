"""One table of tunedeck's config file (:func:`tunedeck.util.paths.config_file`), read for the
laptop side (``[keymap]``, ``[groups]``); each reader checks its own entries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomllib

from tunedeck.util.paths import config_file


def config_table(
    name: str, shape: str, error: type[ValueError], path: Path | None = None
) -> tuple[Path | None, dict[str, Any]]:
    """The file (``path``, else the config file; None when there is none) and its table
    ``[name]``, {} when there is no file or no such table. A file that cannot be read or parsed, or a ``[name]`` that is not a
    table (``shape`` says what it should hold), raises ``error`` with one line naming the file."""
    path = path or config_file()
    if path is None or not path.is_file():
        return path, {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{path}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: {e}") from None
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise error(f"{path}: [{name}] must be a table of {shape}")
    return path, table


__all__ = ["config_table"]
