"""The Bench setup form's workload source: the choice becomes `tunedeck bench` options, and the
preview shows what each level would send before anything starts (lengths, their histogram, the
prefix-sharing ratio), built by the same function as `tunedeck bench --preview`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Checkbox, Input, Select

from tests.conftest import tunedeck_cmd
from tests.waits import until_async
from tunedeck.ui.screens.bench_form import BenchFormError, option_values
from tunedeck.ui.screens.bench_setup import BenchSetupScreen

SIZE = (120, 60)


def preview_text(setup: BenchSetupScreen) -> str:
    return str(setup.query_one("#bs-preview").content)


async def shown(pilot, setup: BenchSetupScreen, text: str) -> str:
    await until_async(lambda: text in preview_text(setup), timeout=10, pilot=pilot, what=lambda: preview_text(setup))
    return preview_text(setup)


def sharegpt(path: Path, rows: list[tuple[str, str]]) -> Path:
    convs = [
        {"id": str(i), "conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]}
        for i, (q, a) in enumerate(rows)
    ]
    path.write_text(json.dumps(convs))
    return path


async def _open_form(pilot: Pilot[None]) -> BenchSetupScreen:
    """The bench form on a bare app, aimed at a port nothing listens on (a preview reads no server)."""
    setup = BenchSetupScreen()
    pilot.app.push_screen(setup)
    await pilot.pause()
    setup.query_one("#bs-url", Input).value = "http://127.0.0.1:9"
    return setup


async def test_shared_prefix_preview_reads_the_theoretical_sharing_and_matches_the_cli() -> None:
    async with App[None]().run_test(size=SIZE) as pilot:
        setup = await _open_form(pilot)
        # random by default: its lengths and no sharing
        text = await shown(pilot, setup, "could serve")
        assert "random: 10 requests" in text and "serve 0.0%" in text
        options = "--gsp-num-groups 8 --gsp-prompts-per-group 32 --gsp-system-prompt-len 2048 --gsp-question-len 128"
        setup.query_one("#bs-dataset", Select).value = "shared_prefix"
        setup.query_one("#bs-options", Input).value = options
        setup.query_one("#bs-concurrency", Input).value = "1,32"
        text = await shown(pilot, setup, "256 requests")
        # 8 groups x 32 prompts: all but each group's first find the 2,048-token system prompt
        # cached, 2,048 of their 2,176 tokens: 8*31*2048 / (256*2176) = 91.2%
        assert "C=1, C=32\n  shared_prefix: 256 requests" in text
        assert "input  2176–2176 tokens" in text and "serve 91.2%" in text
        command = str(setup.query_one("#bs-command").content)
        assert "--dataset-name shared_prefix --gsp-num-groups 8" in command
        assert "--input-len" not in command  # the source sets its own lengths
        # the CLI's preview of the same arguments is the same set
        r = subprocess.run(
            [*tunedeck_cmd(), "bench", *setup.current_plan().to_argv(), "--preview", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        cli = json.loads(r.stdout)
        assert [x["level"] for x in cli] == ["C=1", "C=32"]
        assert cli[0]["prefix_shared_ratio"] == 0.9118 and cli[0]["sha256"][:12] in text


async def test_a_dataset_file_previews_its_lengths_and_a_bad_one_names_its_problem(tmp_path: Path) -> None:
    good = sharegpt(tmp_path / "chats.json", [("hello there " * 20, "an answer " * 30)] * 12)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hi", "output_len": 5}\n{"prompt": "hi", "output_len": 5\n')
    async with App[None]().run_test(size=SIZE) as pilot:
        setup = await _open_form(pilot)
        path = setup.query_one("#bs-dataset-path", Input)
        assert path.disabled  # random reads no file
        assert setup.query_one("#bs-ignore-eos", Checkbox).value
        setup.query_one("#bs-dataset", Select).value = "sharegpt"
        await pilot.pause()
        assert not path.disabled
        assert not setup.query_one("#bs-ignore-eos", Checkbox).value  # real answers end at EOS
        assert str(setup.query_one("#bs-error").content) == "dataset file: sharegpt reads a file: give its path"
        path.value = str(good)
        text = await shown(pilot, setup, "sharegpt: 10 requests")
        assert "lengths estimated" in text
        assert "--no-ignore-eos" in str(setup.query_one("#bs-command").content)
        # a malformed record: one line naming the file and the line, in the preview, before any start
        setup.query_one("#bs-dataset", Select).value = "custom"
        path.value = str(bad)
        text = await shown(pilot, setup, "preview: ")
        assert f"{bad}:2: not valid JSON" in text, text
        path.value = str(tmp_path / "missing.jsonl")
        text = await shown(pilot, setup, "no such file")


def test_the_options_field_takes_workload_options_only() -> None:
    assert option_values("--random-range-ratio 0.5 --context-limit=4096 --gsp-num-groups 8") == {
        "--random-range-ratio": 0.5,
        "--context-limit": 4096,
        "--gsp-num-groups": 8,
    }
    for text, why in (
        ("--url http://evil:1", "'--url' is not a workload option"),
        ("--json /etc/passwd", "'--json' is not a workload option"),
        ("--gsp-num-groups", "--gsp-num-groups needs a value"),
        ("--gsp-num-groups 'open", "No closing quotation"),
        ("--gsp-num-groups 0", "--gsp-num-groups '0': must be >= 1"),
        ("--random-range-ratio 1", "--random-range-ratio '1': must be within 0"),
    ):
        try:
            option_values(text)
        except BenchFormError as e:
            assert e.field == "options" and why in str(e), (text, e)
        else:
            raise AssertionError(f"{text!r} accepted")


def test_an_option_of_another_source_is_named_in_the_form() -> None:
    from tests.ui_fakes import server
    from tunedeck.ui.screens.bench_form import BenchForm, bench_plan

    form = BenchForm(options="--gsp-num-groups 8")
    try:
        bench_plan(form, server("s", "ready", port=1), target=None, demo=False)
    except BenchFormError as e:
        assert str(e) == "options: --gsp-num-groups applies to --dataset-name shared_prefix, not random"
    else:
        raise AssertionError("an option of another source accepted")
