"""A plan's ``[workload]`` table and `tunedeck ab --workload NAME`."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import tunedeck_cmd
from tunedeck.ab.plan import Plan
from tunedeck.ab.plans import PlanError, parse_plan_file, parse_plan_text
from tunedeck.bench.workloads import WorkloadSpec
from tunedeck.commands.ab import with_workload

BASE = """name = "wl"
input_len = 64
output_len = 16
ignore_eos = true

[[level]]
concurrency = 2
num_prompts = 10
"""


def test_a_plan_carries_its_workload_to_the_host_and_back():
    plan = parse_plan_text(BASE + '\n[workload]\nname = "shared_prefix"\nnum_groups = 2\nprompts_per_group = 3\n')
    assert plan.workload == WorkloadSpec("shared_prefix", None, {"num_groups": 2, "prompts_per_group": 3})
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.workload == plan.workload
    assert parse_plan_text(BASE).workload == WorkloadSpec()  # no table: random token ids, as before


def test_a_plan_option_of_another_source_names_its_line():
    text = BASE + '\n[workload]\nname = "shared_prefix"\nnum_group = 2\n'
    with pytest.raises(PlanError) as e:
        parse_plan_text(text, source="wl.toml")
    assert str(e.value).startswith("wl.toml:12: workload.num_group: not an option of shared_prefix")
    with pytest.raises(PlanError, match=r"wl.toml:11: workload.name: expected one of random, sharegpt"):
        parse_plan_text(BASE + '\n[workload]\nname = "sharegtp"\n', source="wl.toml")
    with pytest.raises(PlanError, match="sharegpt needs a file"):
        parse_plan_text(BASE + '\n[workload]\nname = "sharegpt"\n', source="wl.toml")


def test_a_file_path_is_relative_to_the_plans_folder_and_checked_before_a_run(tmp_path):
    (tmp_path / "c.jsonl").write_text('{"prompt": "hello there", "output_len": 3}\n{"prompt": 5}\n')
    f = tmp_path / "wl.toml"
    f.write_text(BASE + '\n[workload]\nname = "custom"\npath = "c.jsonl"\n')
    plan = parse_plan_file(f)
    assert plan.workload.path == str(tmp_path / "c.jsonl")
    with pytest.raises(ValueError, match=rf"plan wl, level C=2: {tmp_path / 'c.jsonl'}:2: 'prompt' must be"):
        with_workload(plan, None)


def test_ab_workload_by_name_uses_that_sources_defaults():
    plan = parse_plan_text(BASE)
    assert with_workload(plan, "prefix_repetition").workload == WorkloadSpec("prefix_repetition")
    with pytest.raises(ValueError, match=r"--workload sharegpt needs a file"):
        with_workload(plan, "sharegpt")


@pytest.mark.timeout(60)
def test_ab_cli_refuses_an_unknown_workload_in_one_line():
    r = subprocess.run(
        [*tunedeck_cmd(), "ab", "pa", "pb", "--demo", "--workload", "sharegtp"],
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "tunedeck ab: --workload 'sharegtp': expected one of random, sharegpt, custom, prefix_repetition, "
        "shared_prefix, text, conversation, mooncake, burstgpt"
    ]


@pytest.mark.timeout(60)
def test_plans_show_names_the_workload(tmp_path):
    f = tmp_path / "wl.toml"
    f.write_text(BASE + '\n[workload]\nname = "prefix_repetition"\nnum_prefixes = 3\n')
    r = subprocess.run([*tunedeck_cmd(), "plans", "show", str(f)], capture_output=True, text=True, timeout=50)
    assert r.returncode == 0, r.stderr
    assert "  workload: prefix_repetition (num_prefixes=3)" in r.stdout.splitlines()
