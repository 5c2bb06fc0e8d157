"""The tuning journal: append-only, crash-tolerant, merged view, exports."""

from __future__ import annotations

import csv
import io
import json

from tunedeck.ab.journal import Journal, export, journal_path
from tunedeck.util.paths import data_dir


def test_journal_lives_in_data_dir_and_appends():
    j = Journal()
    assert j.path == data_dir() / "journal.jsonl" == journal_path()
    j.record_launch(
        "run-1",
        profile="sglang-base",
        host="demo",
        ready=True,
        startup_s=12.5,
        server_log="/h/runs/run-1/server.log",
        timeline=[{"phase": "ready", "t": 12.5}],
    )
    j.record_bench(
        "bench-1",
        profile="sglang-base",
        host="demo",
        concurrency=1,
        summary={"output_throughput": 99.5, "median_tpot_ms": 10.0, "junk": 1},
        ab_id="ab-1",
        side="A",
        launch_run_id="run-1",
    )
    lines = j.path.read_text().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[1])["numbers"] == {"output_throughput": 99.5, "median_tpot_ms": 10.0}


def test_ab_start_then_end_latest_wins_and_interrupted():
    j = Journal()
    j.append({"kind": "ab", "id": "ab-x", "status": "running", "a": {"profile": "p1"}, "b": {"profile": "p2"}})
    assert j.entries("ab")[0]["status"] == "interrupted"
    j.append(
        {
            "kind": "ab",
            "id": "ab-x",
            "status": "completed",
            "a": {"profile": "p1"},
            "b": {"profile": "p2"},
            "comparison": {"headline": "B is faster", "rows": []},
        }
    )
    ents = j.entries("ab")
    assert len(ents) == 1 and ents[0]["status"] == "completed"
    assert j.find("ab-") is ents[0] or j.find("ab-")["id"] == "ab-x"
    assert j.find("zzz") is None


def test_torn_tail_is_skipped_and_repaired():
    j = Journal()
    j.append({"kind": "bench", "id": "b1"})
    with open(j.path, "ab") as f:
        f.write(b'{"kind":"bench","id":"b2"')  # crash mid-write
    assert [e["id"] for e in j.entries()] == ["b1"]
    j.append({"kind": "bench", "id": "b3"})
    assert [e["id"] for e in j.entries()] == ["b1", "b3"]
    for line in j.path.read_text().splitlines():
        json.loads(line)


def test_nan_is_stored_as_null():
    j = Journal()
    j.append({"kind": "bench", "id": "b", "numbers": {"x": float("nan")}})
    assert j.entries()[0]["numbers"] == {"x": None}


def test_exports():
    j = Journal()
    j.record_launch(
        "run-1",
        profile="sglang-base",
        host="demo",
        ready=False,
        diagnosis="CUDA out of memory",
        server_log="/l/server.log",
    )
    j.record_bench("bench-1", profile="sglang-base", concurrency=16, summary={"output_throughput": 1234.5})
    j.append(
        {
            "kind": "ab",
            "id": "ab-1",
            "status": "completed",
            "host": "demo",
            "plan": "quick",
            "a": {
                "profile": "sglang-base",
                "runs": [
                    {"startup_s": 3.0, "server_log": "/a.log", "levels": [{"run_id": "bench-1", "concurrency": 1}]}
                ],
            },
            "b": {"profile": "sglang-tuned", "runs": []},
            "comparison": {
                "headline": "B (sglang-tuned) is faster",
                "a": "A",
                "b": "B",
                "rows": [
                    {"metric": "Peak", "a": {"mean": 10.0}, "b": {"mean": 12.0}, "delta_pct": 20.0, "verdict": "B +20%"}
                ],
            },
        }
    )
    ents = j.entries()
    md = export(ents, "md")
    assert "CUDA out of memory" in md and "`bench-1`" in md
    assert "| Peak | 10.00 | 12.00 | +20% | B +20% |" in md
    rows = list(csv.DictReader(io.StringIO(export(ents, "csv"))))
    assert [r["kind"] for r in rows] == ["launch", "bench", "ab"]
    assert rows[2]["profile"] == "sglang-base vs sglang-tuned" and rows[2]["links"] == "bench-1"
    assert rows[2]["server_log"] == "/a.log"
    assert json.loads(export(ents, "json"))[2]["id"] == "ab-1"


def test_results_store_runs_are_listed_once():
    from tunedeck.util.files import atomic_write_json

    d = data_dir() / "results" / "20261130-100000-abcdef"
    atomic_write_json(d / "meta.json", {"created": 1.8e9, "profile": "p", "params": {"max_concurrency": 8}})
    atomic_write_json(d / "summary.json", {"output_throughput": 10.0, "partial": False})
    j = Journal()
    ents = j.entries(include_results=True)
    assert [(e["kind"], e["id"], e["concurrency"]) for e in ents] == [("bench", "20261130-100000-abcdef", 8)]
    j.record_bench("20261130-100000-abcdef", profile="p", concurrency=8, summary={"output_throughput": 10.0})
    assert len(j.entries(include_results=True)) == 1
    assert j.entries()[0].get("source") is None
