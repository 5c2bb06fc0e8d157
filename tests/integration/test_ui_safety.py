"""Safety: nothing dangerous is one stray key away (Pilot tests that drive the real screens)."""

from __future__ import annotations

import functools

import pytest
from textual.app import App
from textual.widgets import Input

from tests.screenapp import ScreenApp
from tunedeck.profiles.store import ProfileStore
from tunedeck.ui.screens.launch import LaunchScreen
from tunedeck.ui.screens.modals import ConfirmModal
from tunedeck.widgets.preset_form import PresetForm

pytestmark = pytest.mark.timeout(90)
SIZE = (120, 40)


class FormApp(ScreenApp):
    def __init__(self, screen: LaunchScreen) -> None:
        super().__init__(screen)
        self.launched: list[LaunchScreen.LaunchRequested] = []

    def on_launch_screen_launch_requested(self, message: LaunchScreen.LaunchRequested) -> None:
        self.launched.append(message)


@pytest.fixture
def store(tmp_path, monkeypatch) -> ProfileStore:
    monkeypatch.setenv("TUNEDECK_PROFILES", str(tmp_path / "user"))
    return ProfileStore()


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause()


# ---------------------------------------------------------------- the one confirm dialog
async def test_confirm_modal_enter_and_escape_cancel_only_y_confirms():
    answers: list[bool | None] = []
    app = App()
    async with app.run_test(size=SIZE) as pilot:
        for keys in (["enter"], ["escape"], ["n"], ["tab", "enter"], ["y"]):
            app.push_screen(ConfirmModal("Stop run abc?", action="Stop", danger=True), answers.append)
            await settle(pilot)
            assert app.focused is not None and app.focused.id == "confirm-cancel"
            await pilot.press(*keys)
            await settle(pilot)
    # enter on the default (Cancel), escape, n: no; tab moves to Stop, then enter: yes; y: yes
    assert answers == [False, False, False, True, True]


async def test_question_is_never_markup():
    app = App()
    async with app.run_test(size=SIZE) as pilot:
        app.push_screen(ConfirmModal("Stop [bold]run[/] [red]x"))
        await settle(pilot)
        label = app.screen.query_one("#confirm-question")
        assert "[bold]run[/] [red]x" in str(label.render())


# ---------------------------------------------------------------- the launch form
async def test_form_ctrl_l_runs_preflight_tp16_on_8_gpus_is_not_launched(store):
    from tunedeck.sim.demo import demo_host

    screen = LaunchScreen(store.get("sglang-base"), store=store, host=demo_host(), demo=True)
    app = FormApp(screen)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        tp = screen.query_one("#tp", Input)
        tp.value = ""
        tp.focus()
        await pilot.press("1", "6", "ctrl+l")
        await settle(pilot)
        await app.workers.wait_for_complete()
        await settle(pilot)
        form = screen.query_one(PresetForm)
        assert not app.launched
        assert any(m.severity == "error" and "tensor parallel size 16 > 8" in m.text for m in form.messages), (
            form.messages
        )
        assert app.screen is screen


async def test_form_escape_asks_before_dropping_edits(store):
    screen = LaunchScreen(store.get("sglang-base"), store=store)
    app = FormApp(screen)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        title = str(screen.query_one("#launch-title").render())
        assert "sglang-base" in title and "read-only" in title
        screen.query_one("#model", Input).focus()
        await pilot.press("end", "x", "escape")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmModal)
        assert "unsaved" in str(screen.query_one("#launch-title").render())
        await pilot.press("enter")  # the default is Cancel: keep editing
        await settle(pilot)
        assert app.screen is screen
        assert screen.query_one("#model", Input).value.endswith("x")
        await pilot.press("escape", "y")
        await settle(pilot)
        assert app.screen is not screen


async def test_form_escape_without_edits_goes_back(store):
    screen = LaunchScreen(store.get("sglang-base"), store=store)
    app = FormApp(screen)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is not screen and not isinstance(app.screen, ConfirmModal)


async def test_form_shows_diff_against_the_saved_file(store):
    screen = LaunchScreen(store.get("sglang-base"), store=store)
    app = FormApp(screen)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen.query_one("#tp", Input).value = "4"
        await settle(pilot)
        lines = [m.text for m in screen.query_one(PresetForm).messages if m.key == "vs saved"]
        assert any("tp-size" in line for line in lines), lines


# ---------------------------------------------------------------- bench setup
async def test_bench_setup_enter_in_a_field_does_not_start_a_load_test():
    from tunedeck.ui.screens.bench_setup import BenchSetupScreen

    app = App()
    async with app.run_test(size=SIZE) as pilot:
        setup = BenchSetupScreen()
        app.push_screen(setup)
        await settle(pilot)
        setup.query_one("#bs-concurrency", Input).focus()
        await pilot.press("enter", "enter", "enter")
        await settle(pilot)
        assert app.screen is setup
        assert setup.last_plan is None


# ---------------------------------------------------------------- pre-flight on the bind address
async def test_builtin_profiles_bind_loopback_and_wider_binds_warn():
    from tunedeck.profiles.preflight import preflight
    from tunedeck.sim.demo import demo_host

    store = ProfileStore()
    assert all(store.get(n).host == "127.0.0.1" for n in store.names() if store.get(n).source == "builtin")
    host = demo_host()
    base = store.get("sglang-base")
    rep = await preflight(host, base, demo=True, store=store)
    assert not any(f.code == "bind-wide" for f in rep.findings)
    rep = await preflight(host, base.with_(host="0.0.0.0"), demo=True, store=store)
    assert any(f.code == "bind-wide" and f.severity == "warning" and "0.0.0.0" in f.message for f in rep.findings)


# ---------------------------------------------------------------- tunedeck stop
def test_stop_without_a_terminal_and_without_yes_does_not_stop():
    from tests.clifix import launch_fake, run_cli
    from tests.ports import free_port

    td = functools.partial(run_cli, timeout=60)
    r = td(*launch_fake(free_port(), 0.3))
    assert r.returncode == 0, r.stderr
    try:
        r = td("stop", stdin="n\n")
        assert r.returncode == 1 and "--yes" in r.stderr, r.stderr
        r = td("stop", stdin="y\n")  # piped "y" is not a terminal's answer either
        assert r.returncode == 1
        r = td("runs")
        assert "ready" in r.stdout or "running" in r.stdout, r.stdout
    finally:
        r = td("stop", "--yes", "--grace", "5")
    assert r.returncode == 0, r.stderr


async def test_form_edits_speculative_decoding(store):
    screen = LaunchScreen(store.get("sglang-eagle3"), store=store)
    app = FormApp(screen)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert screen.query_one("#spec-algorithm", Input).value == "EAGLE3"
        assert screen.query_one("#spec-num-steps", Input).value == "5"
        assert not screen.dirty
        steps = screen.query_one("#spec-num-steps", Input)
        steps.value = ""
        steps.focus()
        await pilot.press("3")
        await settle(pilot)
        form = screen.query_one(PresetForm)
        assert "--speculative-num-steps=3" in form.preview_text and screen.dirty
        screen.query_one("#spec-algorithm", Input).value = ""
        screen.query_one("#spec-draft-model", Input).value = ""
        await settle(pilot)
        assert "--speculative" not in form.preview_text
