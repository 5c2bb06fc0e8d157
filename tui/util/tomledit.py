"""Rewrite a user's TOML file without losing what they wrote: comments, blank lines, key order and
the formatting of every value that did not change stay as they were (tomlkit's document model).

Fresh files are written by ``tomli_w`` from a plain dict; a file the user may have edited by hand is
updated here instead: ``updated_toml(old_text, before, after)`` returns ``old_text`` with exactly the
changes that turn the data ``before`` into ``after``.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import tomlkit


def _apply(doc: MutableMapping[str, Any], before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    """Change ``doc`` by what differs between ``before`` and ``after`` (the data the file meant,
    defaults included, and the data to save); a key whose value did not change is left as written,
    or left out where the file left it out."""
    for key in before:
        if key not in after and key in doc:
            del doc[key]
    for key, value in after.items():
        if key in before and before[key] == value:
            continue
        old = doc.get(key)
        if isinstance(value, Mapping) and isinstance(old, MutableMapping):
            prior = before.get(key)
            _apply(old, prior if isinstance(prior, Mapping) else {}, value)
        else:
            doc[key] = value


def updated_toml(old_text: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """``old_text`` changed by exactly what turns ``before`` into ``after``; nothing else touched.

    ``before`` is the data ``old_text`` stands for as the program reads it (defaults filled in), so a
    default the user never wrote is not written either. Raises ``tomlkit.exceptions.ParseError``
    (a ``ValueError``) when ``old_text`` is not TOML."""
    doc = tomlkit.parse(old_text)
    _apply(doc, before, after)
    return tomlkit.dumps(doc)
