"""The simulator's GPU records (tui/sim/gpus.py): what a server holds, published for the simulated
nvidia-smi. A record that cannot be written, removed or read is said in the log, once, not dropped
in silence: the smi would otherwise show those GPUs free with nothing to say why."""

from __future__ import annotations

import json
import logging
import os

from tunedeck.sim.gpus import ServerRecord, live_servers


def test_a_record_that_cannot_be_written_is_logged_once_and_again_when_it_recovers(tmp_path, caplog):
    root = tmp_path / "state"
    root.write_text("a file where the state folder should be")
    rec = ServerRecord("sglang", [0], root=root)
    with caplog.at_level(logging.INFO, logger="tunedeck.sim.gpus"):
        for _ in range(3):
            rec.publish({0: {"used_mib": 1000}})
        assert [r.levelname for r in caplog.records] == ["WARNING"]
        assert str(rec.path) in caplog.records[0].getMessage()
        root.unlink()
        rec.publish({0: {"used_mib": 1000}})
        rec.publish({0: {"used_mib": 2000}})
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    assert json.loads(rec.path.read_text())["gpus"] == {"0": {"used_mib": 2000}}
    assert [r["pid"] for r in live_servers(root)] == [os.getpid()]
    rec.remove()
    rec.remove()  # gone already: nothing to say
    assert live_servers(root) == [] and len(caplog.records) == 2


def test_an_unreadable_record_is_skipped_with_its_path_and_the_others_still_count(tmp_path, caplog):
    rec = ServerRecord("vllm", [1], root=tmp_path)
    rec.publish({1: {"used_mib": 500}})
    bad = rec.path.with_name("12345.json")
    bad.write_text('{"pid": 12345, "gpus": ')
    with caplog.at_level(logging.WARNING, logger="tunedeck.sim.gpus"):
        for _ in range(3):  # as a looping nvidia-smi reads them: said once
            assert [r["engine"] for r in live_servers(tmp_path)] == ["vllm"]
    assert len(caplog.records) == 1 and str(bad) in caplog.records[0].getMessage()


def test_a_record_that_is_json_but_not_an_object_is_skipped_with_its_path(tmp_path, caplog):
    rec = ServerRecord("sglang", [0], root=tmp_path)
    rec.publish({0: {"used_mib": 500}})
    odd = rec.path.with_name("23456.json")
    odd.write_text("[1, 2]")
    with caplog.at_level(logging.WARNING, logger="tunedeck.sim.gpus"):
        assert [r["engine"] for r in live_servers(tmp_path)] == ["sglang"]
    assert len(caplog.records) == 1
    assert str(odd) in caplog.records[0].getMessage() and "a JSON list, not an object" in caplog.records[0].getMessage()
