"""A/B plans: shipped plans load; bad TOML is refused naming file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunedeck.ab.plans import BUILTIN_PLANS, PlanError, list_plans, load_plan, parse_plan_text

GOOD = """
name = "p"
input_len = 10
output_len = 20
ignore_eos = true
warmup = 1

[[level]]
concurrency = 1
num_prompts = 5

[[level]]
concurrency = 4
num_prompts = 20
output_len = 7
"""


def test_builtin_plans_load():
    names = [n for n, _ in list_plans()]
    for n in BUILTIN_PLANS:
        assert n in names
    quick = load_plan("quick")
    assert quick.concurrencies == (1, 16)
    assert quick.ignore_eos is True
    default = load_plan("default")
    assert default.concurrencies == (1, 128)
    assert not default.warnings()  # >= 5 x C prompts
    for lv in default.levels:
        assert lv.num_prompts >= 5 * lv.concurrency
    assert load_plan("sweep").concurrencies == (1, 8, 32, 128)


def test_level_overrides_and_defaults():
    p = parse_plan_text(GOOD, source="p.toml")
    assert p.levels[0].output_len == 20 and p.levels[1].output_len == 7
    assert p.levels[1].input_len == 10 and p.levels[1].warmup == 1
    assert p.peak_concurrency == 4 and p.single_concurrency == 1
    assert p.to_dict()["levels"][1]["num_prompts"] == 20


def _err(text: str) -> PlanError:
    with pytest.raises(PlanError) as ei:
        parse_plan_text(text, source="bad.toml")
    return ei.value


def test_syntax_error_names_file_and_line():
    e = _err(GOOD.replace("output_len = 20", "output_len = = 20"))
    assert e.file == "bad.toml" and e.line == 4
    assert str(e).startswith("bad.toml:4:")


def test_unknown_top_key_named_with_line():
    e = _err(GOOD.replace("warmup = 1", "warmpu = 1"))
    assert e.key == "warmpu" and e.line == 6 and "unknown key" in str(e)


def test_unknown_level_key_named_with_line():
    e = _err(GOOD.replace("num_prompts = 20", "num_prompt = 20"))
    assert e.key == "level[1].num_prompt" and e.line == 14


def test_wrong_types_and_values():
    assert _err(GOOD.replace("ignore_eos = true", 'ignore_eos = "yes"')).key == "ignore_eos"
    assert _err(GOOD.replace("concurrency = 4", "concurrency = 0")).key == "level[1].concurrency"
    assert _err(GOOD.replace("concurrency = 4", "concurrency = 1")).key == "level[1].concurrency"
    assert _err(GOOD.replace("input_len = 10", "input_len = 1.5")).key == "input_len"
    assert _err(GOOD.replace("ignore_eos = true\n", "")).key == "ignore_eos"
    assert _err(GOOD.split("[[level]]")[0]).key == "level"
    assert _err(GOOD.replace('name = "p"', 'name = "p"\nendpoint = "grpc"')).key == "endpoint"


def test_unknown_plan_name_lists_known(tmp_path: Path):
    with pytest.raises(PlanError) as ei:
        load_plan("nope")
    assert "quick" in str(ei.value)
    with pytest.raises(PlanError):
        load_plan("../etc/passwd")


def test_user_plan_overrides_and_file_path(tmp_path: Path):
    from tunedeck.ab.plans import user_plans_dir

    d = user_plans_dir()
    d.mkdir(parents=True)
    (d / "quick.toml").write_text(GOOD.replace('name = "p"', 'name = "quick"'))
    assert load_plan("quick").concurrencies == (1, 4)
    f = tmp_path / "mine.toml"
    f.write_text(GOOD)
    assert load_plan(str(f)).name == "p"


def test_cli_plans_check_reports_error(tmp_path: Path):
    import subprocess

    from tests.conftest import tunedeck_cmd

    f = tmp_path / "broken.toml"
    f.write_text(GOOD.replace("warmup = 1", "warmup = -1"))
    r = subprocess.run(
        [*tunedeck_cmd(), "plans", "check", str(f)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert "broken.toml:6: warmup: must be >= 0" in r.stderr
    assert "Traceback" not in r.stderr
