"""The simulator's GPU records (tui/sim/gpus.py): what a server holds, published for the simulated
nvidia-smi. A record that cannot be written, removed or read is said in the log, once, not dropped
in silence: the smi would otherwise show those GPUs free with nothing to say why."""

from __future__ import annotations

import json
import logging
import os

import pytest

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


@pytest.mark.parametrize(
    ("text", "cause"),
    [('{"pid": 12345, "gpus": ', "Expecting value"), ("[1, 2]", "a JSON list, not an object")],
    ids=["cut-short", "not-an-object"],
)
def test_an_unreadable_record_is_skipped_with_its_path_and_the_others_still_count(tmp_path, caplog, text, cause):
    rec = ServerRecord("vllm", [1], root=tmp_path)
    rec.publish({1: {"used_mib": 500}})
    bad = rec.path.with_name("12345.json")
    bad.write_text(text)
    with caplog.at_level(logging.WARNING, logger="tunedeck.sim.gpus"):
        for _ in range(3):  # as a looping nvidia-smi reads them: said once
            assert [r["engine"] for r in live_servers(tmp_path)] == ["vllm"]
    assert len(caplog.records) == 1
    assert str(bad) in caplog.records[0].getMessage() and cause in caplog.records[0].getMessage()


def test_a_ramp_step_is_published_at_most_every_quarter_second_and_the_publisher_writes_what_was_skipped(
    tmp_path, monkeypatch
):
    """A start-up squeezed into a second steps its memory dozens of times (weight shards, graph
    captures): a step writes the record at most every 0.25 s; a phase's end, and the server's
    publisher (every 0.5 s), always write the figures as they are."""
    import time as _time
    from types import SimpleNamespace

    from tunedeck.sim import gpus
    from tunedeck.sim.state import GpuUse

    clock = [1000.0]
    monkeypatch.setattr(gpus, "time", SimpleNamespace(monotonic=lambda: clock[0], time=_time.time))
    use = GpuUse(SimpleNamespace(engine="sglang", gpus=[0, 1], rank_base=0))  # type: ignore[arg-type]
    use.record = ServerRecord("sglang", [0, 1], root=tmp_path)

    def shown() -> int:
        return json.loads(use.record.path.read_text())["gpus"]["0"]["used_mib"]

    use.set_mem(1.0, 0)
    assert shown() == 1024
    for i in range(1, 40):  # steps within the same quarter second
        use.set_mem(1.0 + i / 10, 3, force=False)
    assert shown() == 1024
    clock[0] += 0.3
    use.set_mem(5.0, 3, force=False)
    assert shown() == 5 * 1024
    use.set_mem(6.0, 3, force=False)  # skipped, then the publisher's turn
    assert shown() == 5 * 1024
    use.publish()
    assert shown() == 6 * 1024
    use.set_mem(7.0, 0)  # a phase's end
    assert shown() == 7 * 1024
    use.close()
