"""End to end over the simulator: the same EAGLE on/off A/B, measured on natural text and on random
token ids, reaches different verdicts, and only the random-ids report says its verdict does not
transfer.

The simulator's rule (docs/sim-model.md, "Speculative acceptance from the content"): natural text
accepts drafts at about the method's rate, random ids at about half of it. At C=32 a verify step
of 3 EAGLE drafts costs ~1.96 target steps, so on 1,024-token prompts EAGLE gains ~+28% on text
(~2.5 tokens per step) and loses ~-15% on random ids (~1.67); measured +20% and -13%. The test
asserts the verdicts (allowing "not judged" only where the loaded test machine marked a level
busy) and the gap between the two gains.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import tunedeck_cmd
from tests.simfix import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]

SPEC = """
[speculative]
algorithm = "EAGLE"
draft_model = "lmsys/sglang-EAGLE-LLaMA3-Instruct-8B"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
"""

PLAN = """
name = "spec-c32"
description = "EAGLE on/off at C=32 on natural text, answers end at EOS"
endpoint = "completions"
input_len = 1024
output_len = 128
ignore_eos = false
temperature = 0.0
seed = 3
warmup = 2

[workload]
name = "text"

[[level]]
label = "loaded"
concurrency = 32
num_prompts = 96
"""


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Two copies of sglang-base on a free port, B with EAGLE (3 drafts), and the C=32 plan."""
    user = tmp_path / "profiles"
    user.mkdir()
    monkeypatch.setenv("TUNEDECK_PROFILES", str(user))
    monkeypatch.setenv("TUNEDECK_SIM_LOAD_S", "1")
    port = free_port()
    base = (REPO / "profiles" / "servers" / "sglang-base.toml").read_text()
    base = re.sub(r"(?m)^port = \d+$", f"port = {port}", base)
    model = 'model = "meta-llama/Llama-3.1-8B-Instruct"'
    base = re.sub(r'(?m)^model = ".*"$', model, base)
    (user / "s-plain.toml").write_text(re.sub(r'(?m)^name = ".*"$', 'name = "s-plain"', base))
    (user / "s-eagle.toml").write_text(re.sub(r'(?m)^name = ".*"$', 'name = "s-eagle"', base) + SPEC)
    plan = tmp_path / "spec-c32.toml"
    plan.write_text(PLAN)
    return {"a": "s-plain", "b": "s-eagle", "plan": str(plan)}


def ab(setup: dict[str, str], *extra: str) -> dict:
    r = subprocess.run(
        [*tunedeck_cmd(), "ab", setup["a"], setup["b"], "--demo", "--plan", setup["plan"], "--json", "--yes", *extra],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=400,
        env=dict(os.environ),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def busy(rep: dict) -> bool:
    return any(
        lv["summary"].get("machine_busy") or lv["summary"].get("client_bound")
        for side in ("a", "b")
        for run in rep[side]["runs"]
        for lv in run["levels"]
    )


def verdict(rep: dict, expected: str) -> None:
    cmp = rep["comparison"]
    if cmp["winner"] is None and busy(rep):
        assert "Not judged" in cmp["headline"], cmp["headline"]
        return
    assert cmp["winner"] == expected, cmp["headline"]


def transfer_warnings(rep: dict) -> list[str]:
    return [w for w in rep["comparison"]["warnings"] if "does not transfer" in w]


def test_eagle_wins_on_text_and_loses_on_random_ids_whose_report_says_it_does_not_transfer(setup):
    text = ab(setup)
    levels = text["b"]["runs"][0]["levels"]
    assert [lv["concurrency"] for lv in levels] == [32]
    s = levels[0]["summary"]
    assert s["workload"]["name"] == "text"
    # acceptance read from the server's counters over the level: text accepts near EAGLE's 0.70
    assert s["spec_decode_acceptance_length"] is not None and s["spec_decode_acceptance_length"] > 2.2, s
    verdict(text, "B")
    assert transfer_warnings(text) == [], text["comparison"]["warnings"]

    rand = ab(setup, "--workload", "random")
    s = rand["b"]["runs"][0]["levels"][0]["summary"]
    assert s["workload"]["name"] == "random"
    assert s["spec_decode_acceptance_length"] is not None and s["spec_decode_acceptance_length"] < 2.0, s
    verdict(rand, "A")
    (w,) = transfer_warnings(rand)
    assert "speculative decoding" in w and "random token ids" in w
    # the raw figures too, judged or not: EAGLE's gain on text is well above its gain on random ids
    # (predicted about x1.28 and x0.85; a busy machine blurs each figure, not a gap this wide)
    assert gain(text) > gain(rand) + 0.15, (gain(text), gain(rand))


def gain(rep: dict) -> float:
    """B's output tok/s over A's at the level."""
    a, b = (rep[side]["runs"][0]["levels"][0]["summary"]["output_throughput"] for side in ("a", "b"))
    return float(b) / float(a)
