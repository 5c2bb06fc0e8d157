"""The ``exit`` event of a host-side job: written and read through one record."""

from __future__ import annotations

import json

from tunedeck.hostside.jobfiles import exit_record, read_exit


def test_the_exit_record_reads_back_as_written():
    for rec in (
        exit_record(0, None),
        exit_record(1, "OSError: disk full"),
        exit_record(None, "killed?", synthetic=True),
    ):
        assert read_exit(json.loads(json.dumps(rec))) == rec
    assert exit_record(0, None) == {"type": "exit", "rc": 0, "error": None}  # no synthetic key when not synthetic


def test_a_hostile_exit_event_reads_as_unknown_not_as_success():
    # what a host sends is checked: a string "0" or a bool is no exit status, a list no error text
    assert read_exit({"type": "exit", "rc": "0", "error": ["x"]}) == {"type": "exit", "rc": None, "error": None}
    assert read_exit({"type": "exit", "rc": True, "error": None})["rc"] is None
    assert "synthetic" not in read_exit({"type": "exit", "rc": 0, "synthetic": "yes"})
