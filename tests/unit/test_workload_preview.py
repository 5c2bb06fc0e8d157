"""The workload preview (tunedeck.bench.workloads.preview, `tunedeck bench --preview`): lengths, their
histogram, and the prefix-sharing ratio an unbounded prefix cache would reach, on sets whose
ratio is known by construction."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.conftest import tunedeck_cmd
from tests.traces import write_jsonl
from tests.unit.test_workloads_sources import BLOCK_ROWS
from tunedeck.bench.client import RequestSpec
from tunedeck.bench.workloads import WorkloadSpec, build_workload
from tunedeck.bench.workloads.preview import Histogram, preview, preview_lines, shared_ratio, sparkline


def build(name: str, n: int = 10, path: Path | None = None, **params: object):
    return build_workload(WorkloadSpec(name, None if path is None else str(path), dict(params)), n, 0)


def test_prefix_sources_share_what_they_repeat() -> None:
    # 8 groups x 32: all but each group's first prompt hit the 2,048-token system prompt
    p = preview(build("shared_prefix", num_groups=8, prompts_per_group=32, system_prompt_len=2048, question_len=128))
    assert p.requests == 256 and abs(p.shared_ratio - 8 * 31 * 2048 / (256 * 2176)) < 1e-9
    # 20 prompts over 10 prefixes of 256 + a 256-token suffix: the second use of each prefix shares it
    p = preview(build("prefix_repetition", n=20, prefix_len=256, suffix_len=256, num_prefixes=10))
    assert p.shared_ratio == 10 * 256 / (20 * 512)
    # random ids share nothing; a fixed random prefix is shared by every prompt but the first
    assert preview(build("random", n=50, input_len=64)).shared_ratio == 0.0
    p = preview(build("random", n=10, input_len=64, prefix_len=32))
    assert p.shared_ratio == 9 * 32 / (10 * 96)


def test_a_prefix_is_shared_only_from_the_start() -> None:
    """The same block after a different one is not a prefix hit (blocks are keyed by what precedes them)."""
    a = list(range(64))
    b = list(range(100, 116)) + a[16:]  # blocks 2..4 equal to a's, block 1 not
    assert shared_ratio([RequestSpec(a, 64, 1), RequestSpec(b, 64, 1)]) == 0.0
    c = a[:32] + [7] * 32
    assert shared_ratio([RequestSpec(a, 64, 1), RequestSpec(c, 64, 1)]) == 32 / 128
    # text: 64-byte blocks
    t = "x" * 640
    assert shared_ratio([RequestSpec(t, 160, 1), RequestSpec(t[:320] + "y" * 320, 160, 1)]) == 320 / 1280


def test_mooncake_hash_ids_share_as_a_chain(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "trace.jsonl", BLOCK_ROWS)
    p = preview(build("mooncake", n=100, path=path))
    # only the second row's block 7 follows the same prefix (nothing) as the first row's
    assert p.shared_ratio == 512 / 3024 and p.span_s == 1.25
    assert p.input["min"] == 100 and p.input["max"] == 1200


def test_a_conversation_shares_its_earlier_turns() -> None:
    p = preview(build("conversation", n=8, turns=4, input_len=64, output_len=128))
    # per session: turn t sees t earlier turns of 64 + 128 tokens before its new 64
    shared = sum(t * 192 for t in range(4))
    assert p.sessions == 2 and abs(p.shared_ratio - shared / (shared + 4 * 64)) < 1e-9


def test_histogram_and_lines() -> None:
    h = Histogram.of([1, 1, 1, 5, 9], bins=4)
    assert h.counts == (3, 0, 1, 1) and sparkline(h) == "█ ▃▃"
    assert Histogram.of([4, 4]).counts == (2,)
    assert len(Histogram.of(list(range(10))).counts) == 6  # 2·√10: a few values, a few bins
    p = preview(build("random", n=200, input_len=1000, range_ratio=0.5))
    lines = preview_lines(p)
    assert lines[0].startswith("random: 200 requests, prompt set ")
    assert re.match(r"input  5\d\d–1[45]\d\d tokens, p50 ", lines[1]), lines[1]
    assert lines[2][:7] == " " * 7 and len(lines[2]) == 7 + 24 and set(lines[2][7:]) <= set("▁▂▃▄▅▆▇█ ")
    assert max(len(line) for line in lines) <= 62
    assert "serve 0.0%" in lines[5]


def test_cli_preview_sends_nothing_and_refuses_a_bad_file_with_one_line(tmp_path: Path) -> None:
    r = subprocess.run(
        [*tunedeck_cmd(), "bench", "--preview", "--json", "--dataset-name", "text", "--concurrency", "1,4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    levels = json.loads(r.stdout)
    assert [x["level"] for x in levels] == ["C=1", "C=4"] and [x["requests"] for x in levels] == [10, 20]
    assert levels[0]["lengths"] == "estimate" and levels[0]["input"]["p50"] == 128
    bad = tmp_path / "t.jsonl"
    bad.write_text(
        '{"timestamp": 200, "input_length": 10, "output_length": 1}\n'
        '{"timestamp": 100, "input_length": 10, "output_length": 1}\n'
    )
    r = subprocess.run(
        [*tunedeck_cmd(), "bench", "--preview", "--dataset-name", "mooncake", "--dataset-path", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == f"tunedeck bench: {bad}:2: timestamp 100 ms is before the previous row's 200 ms"


def test_cli_preview_json_file_is_written_as_the_runs_and_an_unwritable_one_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "new-folder" / "preview.json"
    argv = [*tunedeck_cmd(), "bench", "--preview", "--dataset-name", "text", "--concurrency", "2"]
    r = subprocess.run([*argv, "--json", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    assert [x["level"] for x in json.loads(out.read_text())] == ["C=2"]
    (tmp_path / "a-file").write_text("")
    bad = tmp_path / "a-file" / "preview.json"
    r = subprocess.run([*argv, "--json", str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith(f"tunedeck bench: --json {bad}: ") and r.stderr.count("\n") == 1, r.stderr
