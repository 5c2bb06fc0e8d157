"""`tunedeck report`: what it writes, what it refuses, and one line for bad input."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.test_report import store_result
from tunedeck.ab.journal import Journal
from tunedeck.ab.sides import Side, SideRun, side_to_dict, summaries_to_levels
from tunedeck.bench import store
from tunedeck.cli import main


def _ab_entry(a_id: str, b_id: str) -> str:
    sides = []
    for label, rid in (("A", a_id), ("B", b_id)):
        s = store.summary_for(rid)
        sides.append(
            side_to_dict(
                Side(
                    label,
                    f"p-{label}",
                    "vllm",
                    "m",
                    ("vllm", "serve", "m"),
                    {},
                    {},
                    (SideRun(tuple(summaries_to_levels(s, rid))),),
                )
            )
        )
    rec = Journal().append(
        {"kind": "ab", "status": "completed", "host": "demo", "plan": "quick", "a": sides[0], "b": sides[1]}
    )
    return str(rec["id"])


def test_cli_writes_html_json_and_markdown_and_refuses_to_overwrite(tmp_path: Path, capsys):
    store_result("20260101-000001-bbbbbb", profile="p1", argv=["vllm", "serve", "m"])
    out = tmp_path / "r.html"
    assert main(["report", "20260101-000001-bbbbbb", "--html", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info == {"path": str(out), "kind": "result", "format": "html", "bytes": out.stat().st_size}
    first = out.read_bytes()
    assert first.startswith(b"<!DOCTYPE html>") and b"<svg" in first
    # an existing file: refused, untouched, one line
    out.write_text("keep me")
    assert main(["report", "20260101-000001-bbbbbb", "--html", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already exists" in err[0] and "--force" in err[0]
    assert out.read_text() == "keep me"
    assert main(["report", "20260101-000001-bbbbbb", "--html", str(out), "--force"]) == 0
    assert out.read_bytes().startswith(b"<!DOCTYPE html>")
    capsys.readouterr()
    assert main(["report", "20260101-000001", "--markdown", "-"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# Benchmark 20260101-000001-bbbbbb\n")
    assert "| Side | C |" in md and "Output tok/s over time" in md


def test_cli_reports_an_ab(tmp_path: Path, capsys):
    store_result("20260101-000002-cccccc", profile="p-A", argv=["vllm", "serve", "m"])
    store_result("20260101-000003-dddddd", profile="p-B", argv=["vllm", "serve", "m", "--x"])
    ab = _ab_entry("20260101-000002-cccccc", "20260101-000003-dddddd")
    out = tmp_path / "ab.html"
    assert main(["report", ab, "--html", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "ab"
    html = out.read_text()
    assert "Verdict" in html and "A (p-A)" in html and "B (p-B)" in html
    # both sides on one throughput-over-time chart
    timeline = html.split("Output tok/s over time (C=4)", 1)[1].split("</figure>")[0]
    assert timeline.count('<path class="series"') == 2


def test_cli_bad_input_is_one_line_and_leaves_no_file(tmp_path: Path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", "nosuchid", "--html", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nosuchid" in err[0] and not out.exists()
    store_result("20260101-000004-eeeeee", profile="p", argv=["vllm"])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["report", "20260101-000004-eeeeee", "--html", str(blocker / "r.html")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write" in err[0] and str(blocker) in err[0]
    assert main(["report", "20260101-000004-eeeeee", "--html", "-"]) == 2
    capsys.readouterr()
    assert [p.name for p in tmp_path.iterdir()] == ["file"]  # no partial or temporary file anywhere
