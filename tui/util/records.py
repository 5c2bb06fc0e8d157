"""Plain-dict views of records, for JSON output and the files the host and the laptop share."""

from __future__ import annotations

from typing import Any, Dict


def pick(obj: object, *names: str) -> Dict[str, Any]:
    """``{name: obj.name}`` for each of ``names``, in their order: the fields a JSON view copies
    as they are (the ones it renames or converts are written out beside it)."""
    return {n: getattr(obj, n) for n in names}


__all__ = ["pick"]
