"""The typed benchmark plan: the command line and the Bench screen's form build the same
:class:`BenchPlan`, its command line reads back into an equal plan (hostile values included), and
options that do not go together are refused with one line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.ui_fakes import server
from tunedeck.bench.plan import BenchPlan, num_text
from tunedeck.commands import bench as bench_cmd
from tunedeck.commands.bench import parse_plan, plan_config
from tunedeck.ui.screens.bench_form import BenchForm, BenchFormError, bench_plan

HOSTILE = ("--json /etc/passwd", "-", "", "a b\nc", "x;rm -rf ~", "$(id)", "héllo ☃", "---", "-5", "=", "'\"")

CLI_PLANS = (
    ["--url", "http://127.0.0.1:8000"],
    ["--host", "gpuop@box", "--port", "30000", "--concurrency", "1,16", "--goodput", "ttft:200", "e2el:2500.5"],
    ["--demo", "--port", "1", "--request-rate", "0.5,2,inf", "--no-ignore-eos", "--burstiness", "0.25"],
    ["--url", "https://h:1/v", "--dataset-name", "shared_prefix", "--gsp-num-groups", "8", "--gsp-output-len", "3"],
    ["--url", "http://h:1", "--dataset-name", "conversation", "--input-len", "7", "--conversation-think-s", "0.1"],
    ["--url", "http://h:1", "--dataset-name", "random", "--random-range-ratio", "0.999", "--context-limit", "9"],
    ["--url", "http://h:1", "--capacity", "--slo", "ttft_p90:500", "per_user_tok_s:20", "--capacity-max", "64"],
    ["--url", "http://h:1", "--metric-percentiles", "50,99.9", "--temperature", "0.7", "--seed", "-3"],
    ["--url", "http://h:1", "--no-preconnect", "--workers", "3", "--read-timeout", "1e-3", "--request-timeout", "9"],
    ["--host", "h", "--port", "2", "--client-where", "local", "--progress", "--progress-samples", "--json"],
    ["--deployment", "d-1", "--preview", "--json=out.json", "--warmup", "0", "--ignore-eos", "--endpoint", "chat"],
)


@pytest.mark.parametrize("argv", CLI_PLANS, ids=lambda a: " ".join(a)[:40])
def test_a_command_line_plan_reads_back_from_its_own_command_line(argv: list[str]) -> None:
    plan = parse_plan(argv)
    assert parse_plan(plan.to_argv()) == plan, plan.to_argv()


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_reads_back_as_itself(text: str, tmp_path: Path) -> None:
    texts = {name: text for name in ("profile", "model", "label", "python", "meta_json", "json")}
    plan = BenchPlan(
        host=text or "h",
        port=8000,
        **texts,
        dataset_name="custom",
        dataset_path=str(tmp_path / text.replace("/", "_")),
        workload_options=(("--custom-output-len", 3),),
    )
    argv = plan.to_argv()
    assert parse_plan(argv) == plan, argv


def test_a_bare_double_dash_is_no_value() -> None:
    with pytest.raises(ValueError) as e:
        parse_plan(["--url", "http://h:1", "--label=--"])
    assert str(e.value) == "--label=--: '--' ends the options; it cannot be a value"


def test_numbers_are_written_as_they_read_back() -> None:
    for v, text in ((8, "8"), (2.0, "2"), (0.1 + 0.2, "0.30000000000000004"), (math.inf, "inf"), (1e-300, "1e-300")):
        assert num_text(v) == text and float(text) == v
    plan = parse_plan(["--url", "http://h:1", "--request-rate", "0.30000000000000004,inf"])
    assert plan.request_rate == (0.1 + 0.2, math.inf) and parse_plan(plan.to_argv()) == plan


def test_the_form_and_the_command_line_build_the_same_plan(tmp_path: Path) -> None:
    data = tmp_path / "chats.json"
    form = BenchForm(
        dataset="sharegpt",
        dataset_path=str(data),
        options="--context-limit 4096 --sharegpt-output-len 5",
        concurrency="1,8",
        num_prompts="20",
        warmup="0",
        ignore_eos=False,
        slo_ttft="200",
        slo_e2el="2500.5",
    )
    plan = bench_plan(form, server("sglang-tuned", "ready", port=30001), target="gpuop@box", demo=False)
    argv = plan.to_argv()
    assert argv[:6] == ["--host", "gpuop@box", "--port", "30001", "--profile", "sglang-tuned"]
    assert parse_plan(argv) == plan
    assert plan == parse_plan(
        [
            *("--host", "gpuop@box", "--port", "30001", "--profile", "sglang-tuned", "--concurrency", "1,8"),
            *("--dataset-name", "sharegpt", "--dataset-path", str(data), "--num-prompts", "20", "--warmup", "0"),
            *("--sharegpt-output-len", "5", "--context-limit", "4096", "--no-ignore-eos"),
            *("--goodput", "ttft:200", "e2el:2500.5"),
        ]
    )


def test_the_form_writes_the_options_in_one_order_whatever_order_they_are_typed() -> None:
    s = server("s", "ready", port=1)
    a = bench_plan(
        BenchForm(dataset="shared_prefix", options="--gsp-num-groups 8 --gsp-question-len 4"),
        s,
        target=None,
        demo=False,
    )
    b = bench_plan(
        BenchForm(dataset="shared_prefix", options="--gsp-question-len 4 --gsp-num-groups=8"),
        s,
        target=None,
        demo=False,
    )
    assert a == b and a.workload_options == (("--gsp-num-groups", 8), ("--gsp-question-len", 4))
    assert parse_plan(a.to_argv()) == a


@pytest.mark.parametrize(
    ("argv", "why"),
    (
        (
            ["--concurrency", "1,2", "--request-rate", "1,2"],
            "sweep over --concurrency or over --request-rate, not both",
        ),
        (["--slo", "ttft_p90:5"], "--slo is the target of --capacity: add --capacity"),
        (["--capacity"], "--capacity needs --slo METRIC:BOUND"),
        (["--capacity", "--slo", "ttft_p90:5", "--concurrency", "2"], "--capacity chooses each level's concurrency"),
        (["--capacity", "--slo", "nope:5", "--url", "http://h:1"], "--slo: "),
        (["--goodput", "ttft:x"], "--goodput 'ttft:x': "),
        (["--url", "ftp://h:1"], "--url 'ftp://h:1': expected an http:// or https:// URL"),
        (["--url", "http://h:99999"], "--url 'http://h:99999': the port is not a number from 1 to 65535"),
        (["--url", "http:///v1"], "--url 'http:///v1': no host"),
        (["--url", "http://h:1/\x1b]0;x\x07"], "contains white space or characters that do not print"),
        (["--gsp-num-groups", "2"], "--gsp-num-groups applies to --dataset-name shared_prefix, not random"),
        (["--dataset-name", "sharegpt", "--input-len", "9"], "--input-len does not apply to --dataset-name sharegpt"),
    ),
)
def test_options_that_do_not_go_together_are_one_line(argv: list[str], why: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_plan(argv)
    assert why in str(e.value) and str(e.value).isprintable()  # one line; an escape is quoted, never sent


@pytest.mark.parametrize(
    ("url", "why"),
    (
        ("ftp://h:1", "expected an http:// or https:// URL"),
        ("http://h:0", "the port is not a number from 1 to 65535"),
        ("http://h:1/v\n1", "contains white space or characters that do not print"),  # urlsplit drops it in silence
        ("http://\x1b[2Jh:1", "contains white space or characters that do not print"),
        ("127.0.0.1:8000", "expected an http:// or https:// URL"),
    ),
)
def test_the_forms_url_is_read_as_the_cli_reads_it(url: str, why: str) -> None:
    """The Bench setup form refuses what ``tunedeck bench --url`` refuses, in the same words (the form
    trims the white space around what was typed first; the command line takes the URL as given)."""
    with pytest.raises(BenchFormError) as form:
        bench_plan(BenchForm(url=url), None, target=None, demo=False)
    assert form.value.field == "url" and why in str(form.value), form.value
    with pytest.raises(ValueError) as cli:
        parse_plan(["--url", url])
    assert str(cli.value).startswith("--url ") and why in str(cli.value), cli.value


def test_a_plan_names_no_server_or_two() -> None:
    with pytest.raises(ValueError, match="need --url URL, or --port P with --host/--demo"):
        BenchPlan().check_target()
    with pytest.raises(ValueError, match="give either --url or --host/--demo"):
        BenchPlan(url="http://h:1", demo=True).check_target()
    BenchPlan(demo=True, port=1).check_target()


def test_the_screen_path_previews_a_plan_without_parsing_a_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_parsing(argv: list[str]) -> None:
        raise AssertionError(f"parsed {argv}")

    monkeypatch.setattr(bench_cmd, "parse_args", no_parsing)
    plan = bench_plan(BenchForm(url="http://127.0.0.1:9", concurrency="1,4"), None, target=None, demo=False)
    levels = bench_cmd.level_previews(plan)
    assert [label for label, _p in levels] == ["C=1", "C=4"]
    cfg = plan_config(plan, "http://127.0.0.1:9")
    assert (cfg.concurrency, cfg.input_len, cfg.ignore_eos, cfg.goodput) == ([1, 4], 128, True, {})


def test_the_sample_record_types_every_field_the_engine_writes_and_stores() -> None:
    import dataclasses

    from tunedeck.bench.client import RequestSpec, new_sample
    from tunedeck.bench.records import LevelSummaryRecord, Sample, SampleRecord
    from tunedeck.bench.store import SAMPLE_FIELDS

    typed = set(SampleRecord.__annotations__)
    assert set(new_sample(RequestSpec("hi", 2, 3))) <= typed
    assert tuple(f.name for f in dataclasses.fields(Sample)) == SAMPLE_FIELDS  # stored in the documented order
    assert {"completed", "failed", "duration", "run_id", "partial"} <= set(LevelSummaryRecord.__annotations__)


def test_the_config_takes_every_setting_of_the_plan() -> None:
    plan = parse_plan(
        [
            *("--url", "http://h:1", "--model", "m", "--endpoint", "chat", "--num-prompts", "7", "--burstiness", "0.5"),
            *("--warmup", "2", "--temperature", "0.3", "--seed", "9", "--read-timeout", "5", "--ready-timeout", "6"),
            *("--workers", "2", "--no-preconnect", "--label", "L", "--request-timeout", "4", "--progress"),
            *("--progress-samples", "--request-rate", "3", "--metric-percentiles", "50", "--goodput", "itl:8"),
        ]
    )
    cfg = plan_config(plan, "http://h:1")
    got = (cfg.model, cfg.endpoint, cfg.num_prompts, cfg.burstiness, cfg.warmup, cfg.temperature, cfg.seed)
    assert got == ("m", "chat", 7, 0.5, 2, 0.3, 9)
    assert (cfg.read_timeout, cfg.ready_timeout, cfg.workers, cfg.preconnect, cfg.label) == (5, 6, 2, False, "L")
    assert (cfg.request_deadline, cfg.progress_samples, cfg.concurrency, cfg.request_rate) == (4, True, [], [3.0])
    assert (cfg.percentiles, cfg.goodput) == ([50.0], {"itl": 8.0})
