"""The journal's corrections of launches that were ready and have failed since: appended once, and
the journal (which only grows) parsed again only when a run has newly failed."""

from __future__ import annotations

import threading

from tunedeck.ab.journal import Journal
from tunedeck.hostops.runstore import FAILED, RunRecord
from tunedeck.services.journal import journal_corrections


def _failed(run_id: str) -> RunRecord:
    return RunRecord(run_id, "gpu-a", ["x"], status=FAILED, diagnosis="RuntimeError: CUDA error: out of memory")


def _counting(journal: Journal) -> list[int]:
    """Counts the journal's parses (``entries``)."""
    calls: list[int] = []
    real = journal.entries

    def entries(*args: object, **kwargs: object) -> list[dict[str, object]]:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    journal.entries = entries  # type: ignore[method-assign]
    return calls


def test_a_failed_run_is_corrected_once_and_the_journal_read_again_only_for_a_change(tmp_path):
    j = Journal(tmp_path / "journal.jsonl")
    j.record_launch("r1", profile="p", host="gpu-a", ready=True, startup_s=30.0)
    j.record_launch("r2", profile="p", host="gpu-a", ready=True, startup_s=31.0)
    parses = _counting(j)

    assert journal_corrections([_failed("r1")], j) == ["r1"]
    assert journal_corrections([_failed("r1")], j) == []  # the correction changed the journal: read once more
    assert len(parses) == 2
    assert journal_corrections([_failed("r1")], j) == []  # the next re-reads: nothing parsed
    assert journal_corrections([_failed("r1")], j) == []
    assert len(parses) == 2
    assert journal_corrections([_failed("r1"), _failed("r2")], j) == ["r2"]  # a new failure: read again
    assert len(parses) == 3
    latest = {e["id"]: e for e in Journal(j.path).entries("launch")}
    assert [latest[r]["status"] for r in ("r1", "r2")] == ["failed", "failed"]
    assert latest["r1"]["corrects"] == "ready"


def test_a_ready_entry_written_after_the_run_failed_is_corrected_too(tmp_path):
    """A tuning campaign writes its launches when it ends: a candidate that was ready and died
    meanwhile was checked with no entry; once the journal changes it is checked again."""
    j = Journal(tmp_path / "journal.jsonl")
    j.record_launch("r0", profile="p", host="gpu-a", ready=True, startup_s=30.0)
    assert journal_corrections([_failed("r3")], j) == []  # no entry for r3 yet
    Journal(j.path).record_launch("r3", profile="p+fa3", host="gpu-a", ready=True, startup_s=41.0)
    assert journal_corrections([_failed("r3")], j) == ["r3"]


def test_two_re_reads_at_once_append_one_correction(tmp_path, monkeypatch):
    """Two hosts' re-reads run their checks in threads at once: one correction, not two."""
    import time

    j = Journal(tmp_path / "journal.jsonl")
    j.record_launch("r1", profile="p", host="gpu-a", ready=True, startup_s=30.0)
    real = Journal.entries

    def slow_entries(self: Journal, *args: object, **kwargs: object) -> list[dict[str, object]]:
        got = real(self, *args, **kwargs)  # type: ignore[arg-type]
        time.sleep(0.05)  # a long journal: each reader is still reading when the others start
        return got

    monkeypatch.setattr(Journal, "entries", slow_entries)
    go = threading.Barrier(4)
    done: list[list[str]] = []

    def check() -> None:
        go.wait()
        done.append(journal_corrections([_failed("r1")], Journal(j.path)))

    threads = [threading.Thread(target=check) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(done) == [[], [], [], ["r1"]]
    assert [r.get("corrects") for r in Journal(j.path).records() if r["id"] == "r1"] == [None, "ready"]


def test_a_run_without_a_journal_entry_is_left_to_its_launch(tmp_path):
    """No entry yet: the launch that follows it writes how it ended; nothing is appended here."""
    j = Journal(tmp_path / "journal.jsonl")
    assert journal_corrections([_failed("r9")], j) == []
    assert Journal(j.path).records() == []
