"""Every log row of an INDEX.md parses as the row says: verdict, kind, proving line.

Two indexes are read: the real logs' (``SHARED/data/real-logs/INDEX.md``, fails in CI when
the folder is missing) and the hand-made class logs' (``tests/data/logs/generalise/INDEX.md``).
The expectations are read from the rows' own words, so a row added to an index is checked
without touching this file:

* verdict: ``Expected: ready|failed|starting|unreadable``, else the legend's ``**R yes**``,
  ``**F kind**`` (``F silent death``: neither ready nor failed) and ``R no``;
* kind: ``kind NAME`` or ``**F NAME``; ``generic crash`` is the ``crash`` kind;
* proof: ``proof the last line``, ``proof the first WORD line``, ``proof the WORD line``,
  ``proof line N``;
* port: ``port N`` (the port the engine serves on, or would by default).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REAL_LOGS, REPO, tunedeck_cmd
from tunedeck.logparse import classify, clean_line, decode_log, parse_file

HANDMADE = Path(__file__).resolve().parents[1] / "data" / "logs" / "generalise"

#: the INDEX's words for a kind -> the parser's kind
_KIND_WORDS = {"capture-crash": "capture-failed", "generic": "crash"}
_EXIT = {"ready": 0, "failed": 1, "unreadable": 2, "starting": 3}


@dataclass(frozen=True)
class Row:
    file: str
    verdict: str
    kind: str | None
    proof: str | None  # "last", "line:N", "first:WORD", "any:WORD"
    port: int | None
    text: str


def _verdict(text: str) -> tuple[str, str | None]:
    m = re.search(r"Expected: (ready|failed|starting|unreadable)", text)
    kind: str | None = None
    if m:
        verdict = m.group(1)
        k = re.search(r"Expected: failed, (?:kind )?([\w-]+)", text)
        if k:
            kind = _KIND_WORDS.get(k.group(1), k.group(1))
        return verdict, kind
    f = re.search(r"\*\*F ([\w-]+)", text)
    if f and f.group(1) != "silent":
        return "failed", _KIND_WORDS.get(f.group(1), f.group(1))
    if "**R yes" in text:
        return "ready", None
    return "starting", None


def _proof(text: str) -> str | None:
    if "proof the last line" in text:
        return "last"
    m = re.search(r"proof line (\d+)", text)
    if m:
        return f"line:{m.group(1)}"
    m = re.search(r"proof the first (\S+) line", text)
    if m:
        return f"first:{m.group(1)}"
    m = re.search(r"proof the (\S+) line", text)
    if m:
        return f"any:{m.group(1)}"
    return None


def read_index(path: Path) -> list[Row]:
    """The rows of an INDEX.md table whose first cell names a ``.log`` file."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].endswith(".log"):
            continue
        text = cells[-1]
        verdict, kind = _verdict(text)
        port = re.search(r"\bport (\d+)", text)
        rows.append(Row(cells[0], verdict, kind, _proof(text), int(port.group(1)) if port else None, text))
    return rows


def _lines(path: Path) -> list[str]:
    return decode_log(path.read_bytes()).split("\n")


def _proof_line(path: Path, proof: str) -> set[int]:
    """The physical line numbers the row's proof words allow."""
    lines = _lines(path)
    if proof == "last":
        return {max(i for i, s in enumerate(lines, 1) if s.strip())}
    how, _, what = proof.partition(":")
    if how == "line":
        return {int(what)}

    def holds(s: str) -> bool:
        msg = clean_line(s).msg
        if what == "OOM":
            c = classify(msg)
            return c is not None and c[0] == "oom"
        return f"{what}:" in msg or f"{what} " in msg

    hits = [i for i, s in enumerate(lines, 1) if i > 1 and holds(s)]
    assert hits, f"{path.name}: no line holds {what!r}"
    return {hits[0]} if how == "first" else set(hits)


def _check(folder: Path, row: Row) -> None:
    path = folder / row.file
    st, _ = parse_file(str(path))
    assert st.status == row.verdict, f"{row.file}: {st.status} ({st.describe()}), INDEX says {row.verdict}"
    f = st.failure
    if row.verdict == "failed":
        assert f is not None
        if row.kind is not None:
            assert f.kind == row.kind, f"{row.file}: kind {f.kind} ({f.line}), INDEX says {row.kind}"
        if row.proof is not None:
            assert f.line_no in _proof_line(path, row.proof), f"{row.file}: proof line {f.line_no}: {f.line}"
            assert f.origin != "wrapper", f"{row.file}: a wrapper is never the proof: {f.line}"
    else:
        assert f is None, f"{row.file}: {f}"
    if row.port is not None:
        assert st.port == row.port, f"{row.file}: port {st.port}, INDEX says {row.port}"


def _real_rows() -> list[Row]:
    idx = REAL_LOGS / "INDEX.md"
    return read_index(idx) if idx.is_file() else []


def test_the_real_index_names_every_log_and_each_row_reads(real_logs):
    rows = read_index(real_logs / "INDEX.md")
    assert {r.file for r in rows} == {p.name for p in real_logs.glob("*.log")}
    # each row says something checkable
    assert all(r.verdict != "failed" or r.kind for r in rows)


@pytest.mark.parametrize("row", _real_rows(), ids=lambda r: r.file)
def test_real_log_parses_as_its_index_row_says(real_logs, row):
    _check(real_logs, row)


def test_real_index_is_read_in_ci(real_logs):
    # the parametrised test above is empty when the folder is missing; this one is not
    rows = read_index(real_logs / "INDEX.md")
    assert len(rows) >= 26
    for row in rows:
        _check(real_logs, row)


def _handmade_rows() -> list[Row]:
    return read_index(HANDMADE / "INDEX.md")


def test_every_handmade_log_has_a_row_and_a_header():
    rows = _handmade_rows()
    assert {r.file for r in rows} == {p.name for p in HANDMADE.glob("*.log")}
    for r in rows:
        data = (HANDMADE / r.file).read_bytes()
        if r.verdict == "unreadable":  # the header is readable once the NULs are gone
            first = data[:800].replace(b"\x00", b"").decode("latin-1").split("\n", 1)[0]
        else:
            first = decode_log(data).split("\n", 1)[0]
        assert "hand-made" in first and "class:" in first, r.file


@pytest.mark.parametrize("row", _handmade_rows(), ids=lambda r: r.file)
def test_handmade_log_parses_as_its_index_row_says(row):
    _check(HANDMADE, row)


@pytest.mark.parametrize("row", [r for r in _handmade_rows() if r.verdict != "failed"][:3], ids=lambda r: r.file)
def test_parse_log_exit_status_follows_the_verdict(row):
    r = subprocess.run(
        [*tunedeck_cmd(), "parse-log", str(HANDMADE / row.file)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert r.returncode == _EXIT[row.verdict], r.stdout + r.stderr
