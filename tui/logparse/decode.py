"""What a log's bytes are: a BOM decides the encoding (UTF-8, UTF-16, UTF-32), else UTF-8
with replacement; content that is not text (binary, or UTF-16 without a BOM) is unreadable."""

from __future__ import annotations

import codecs

#: BOMs, longest first (UTF-32 LE begins with UTF-16 LE's BOM)
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
#: decoded characters judged text or not (the start of the log)
SNIFF_CHARS = 8192
#: more than this share of the sample not text (NUL, other controls, undecodable bytes): unreadable
_MAX_NON_TEXT = 0.10
_TEXT_CONTROLS = frozenset("\t\n\r\x1b\x08\x0c")


def sniff(head: bytes) -> tuple[str, int]:
    """(codec, BOM length) for a log that begins with ``head``; without a BOM, UTF-8."""
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec, len(bom)
    return "utf-8", 0


def might_be_bom(head: bytes) -> bool:
    """True while ``head`` is too short to tell whether a BOM starts it."""
    return len(head) < 4 and any(bom.startswith(head) for bom, _ in _BOMS)


def not_text(sample: str, codec: str) -> str | None:
    """Why ``sample`` (the decoded start of a log) is not text, or None when it is."""
    s = sample.lstrip("\x00")  # a file truncated under a writer begins with a hole of NULs
    if not s:
        return None
    bad = sum(1 for c in s if c == "\ufffd" or (c < " " and c not in _TEXT_CONTROLS))
    if bad / len(s) <= _MAX_NON_TEXT:
        return None
    nul = s.count("\x00")
    if codec == "utf-8" and nul * 3 >= len(s):
        return "NUL bytes between the characters (UTF-16 or UTF-32 text without a BOM?)"
    return f"binary content ({bad * 100 // len(s)}% of the first {len(s)} characters are not text)"


def decode_log(data: bytes) -> str:
    """A whole log's text, decoded as :class:`~tunedeck.logparse.parser.LogParser` decodes it."""
    codec, skip = sniff(data[:4])
    return data[skip:].decode(codec, errors="replace")
