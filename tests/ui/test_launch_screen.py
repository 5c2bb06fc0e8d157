"""Pilot tests of the launch form in a minimal App: pick presets, watch the preview, save, reload, launch."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Button, Checkbox, Input, Select

from tests.profilefix import fake_host
from tests.uiapps import FormApp, settle, store  # noqa: F401  (store: a fixture)
from tunedeck.profiles.builder import build_command
from tunedeck.profiles.store import ProfileStore
from tunedeck.ui.screens.launch import LaunchScreen
from tunedeck.widgets.preset_form import PresetForm

pytestmark = pytest.mark.timeout(60)


async def test_pick_presets_and_preview_changes(store):
    screen = LaunchScreen(store.get("sglang-base"), store=store)
    app = FormApp(screen)
    async with app.run_test(size=(120, 50)) as pilot:
        await settle(pilot)
        form = screen.query_one(PresetForm)
        assert "--enable-metrics" in form.preview_text and "NCCL_" not in form.preview_text
        assert form.preview_text == build_command(store.get("sglang-base"), store=store).display
        # pick the PCIe NCCL preset with the keyboard from the Select's overlay
        nccl = screen.query_one("#nccl", Select)
        nccl.focus()
        await pilot.press("enter")
        await pilot.press("down", "enter")
        await settle(pilot)
        assert nccl.value == "pcie"
        assert "NCCL_PROTO=LL" in form.preview_text and "NCCL_NTHREADS=512" in form.preview_text
        assert any(m.key == "nccl.preset" and "not for production" in m.text for m in form.messages)
        # attention backend from the Select
        screen.query_one("#backend", Select).value = "flashinfer"
        await settle(pilot)
        assert "--attention-backend=flashinfer" in form.preview_text
        # per-variable override and a flag typed into inputs
        screen.query_one("#nccl-overrides", Input).focus()
        await pilot.press(*"NCCL_BUFFSIZE=8388608")
        await settle(pilot)
        assert "NCCL_BUFFSIZE=8388608" in form.preview_text and "16777216" not in form.preview_text
        flags = screen.query_one("#flags", Input)
        flags.value = flags.value + " --num-continuous-decode-steps=4"
        await settle(pilot)
        assert "--num-continuous-decode-steps=4" in form.preview_text
        # switching the engine rebuilds the command for vLLM
        screen.query_one("#flags", Input).value = ""
        screen.query_one("#engine", Select).value = "vllm"
        await settle(pilot)
        assert " serve deepseek-ai/DeepSeek-V2-Lite-Chat --tensor-parallel-size=8" in form.preview_text
        assert "--attention-backend" not in form.preview_text
        assert screen.query_one("#prefill", Select).disabled


async def test_inline_validation_and_launch(store):
    from tunedeck.sim.demo import demo_host
    from tunedeck.ui.screens.modals import ConfirmModal

    screen = LaunchScreen(store.get("sglang-tuned"), store=store, host=demo_host(), demo=True)
    app = FormApp(screen)
    async with app.run_test(size=(120, 50)) as pilot:
        await settle(pilot)
        form = screen.query_one(PresetForm)
        env = screen.query_one("#env", Input)
        env.value = "BAD-NAME=1"
        await settle(pilot)
        assert any(m.severity == "error" and m.key == "env.BAD-NAME" for m in form.messages)
        assert form.preview_text == "" and screen.query_one("#launch", Button).disabled
        env.value = "LD_PRELOAD=/opt/x.so"
        await settle(pilot)
        box = screen.query_one("#confirm-dangerous", Checkbox)
        assert box.has_class("-shown") and any("confirm" in m.text for m in form.messages)
        box.value = True
        await settle(pilot)
        assert "LD_PRELOAD=/opt/x.so" in form.preview_text
        screen.query_one("#tp", Input).value = "4"
        await settle(pilot)
        await pilot.click("#launch")  # pre-flight first; its warnings ask (y launches anyway)
        for _ in range(200):
            await pilot.pause(0.05)
            if isinstance(app.screen, ConfirmModal) or app.launched:
                break
        if isinstance(app.screen, ConfirmModal):
            await pilot.press("y")
            await settle(pilot)
        assert len(app.launched) == 1
        msg = app.launched[0]
        assert msg.profile.tp == 4 and msg.profile.confirm_dangerous == ("LD_PRELOAD",)
        assert "--tp-size=4" in msg.command.argv and msg.command.env_dict["NCCL_PROTO"] == "LL"


async def test_save_builtin_refused_save_as_then_reload(store, tmp_path):
    screen = LaunchScreen(store.get("sglang-tuned"), store=store)
    app = FormApp(screen)
    async with app.run_test(size=(120, 50)) as pilot:
        await settle(pilot)
        form = screen.query_one(PresetForm)
        assert screen.query_one("#save", Button).disabled  # built-ins are read-only
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert any("read-only" in m.text for m in form.messages)
        screen.query_one("#nccl", Select).value = "debug"
        screen.query_one("#backend", Select).value = "fa3"
        name = screen.query_one("#save-as-name", Input)
        name.value = "my-tuned"
        await settle(pilot)
        await pilot.click("#save-as")
        await settle(pilot)
        saved = Path(tmp_path / "user" / "my-tuned.toml")
        assert saved.is_file(), form.messages
        assert screen.profile.name == "my-tuned" and not screen.query_one("#save", Button).disabled
        # now a plain save writes the user copy
        screen.query_one("#tp", Input).value = "2"
        await settle(pilot)
        await pilot.click("#save")
        await settle(pilot)
    again = ProfileStore().get("my-tuned")
    assert (again.source, again.nccl_preset, again.attention_backend, again.tp) == ("user", "debug", "fa3", 2)
    assert dict(again.flags)["num-continuous-decode-steps"] == 4
    # reload into a new form: the values come back
    screen2 = LaunchScreen(again, store=ProfileStore())
    async with FormApp(screen2).run_test(size=(120, 50)) as pilot:
        await settle(pilot)
        assert screen2.query_one("#nccl", Select).value == "debug"
        assert screen2.query_one("#backend", Select).value == "fa3"
        assert screen2.query_one("#tp", Input).value == "2"
        assert "NCCL_DEBUG=INFO" in screen2.query_one(PresetForm).preview_text


async def test_backend_choices_come_from_the_host(store, tmp_path):
    host = fake_host(tmp_path, sglang_version="0.5.5")
    screen = LaunchScreen(store.get("sglang-base"), store=store, host=host)
    app = FormApp(screen)
    async with app.run_test(size=(120, 50)) as pilot:
        await settle(pilot)
        await app.workers.wait_for_complete()
        await settle(pilot)
        backend = screen.query_one("#backend", Select)
        values = [v for _, v in backend._options]
        assert "cutlass_mla" in values and "dsa" not in values
        # the pre-flight button shows the host's findings inline
        screen.query_one("#flags", Input).value = "--enable-metrics --attn-dp-size=2"
        await settle(pilot)
        await pilot.click("#preflight")
        await settle(pilot)
        await app.workers.wait_for_complete()
        await settle(pilot)
        form = screen.query_one(PresetForm)
        assert any(
            m.severity == "error" and "--attn-dp-size is not a flag in the --help of sglang 0.5.5" in m.text
            for m in form.messages
        ), form.messages


async def test_running_server_diff_is_shown(store):
    running = build_command(store.get("sglang-base"), store=store)
    screen = LaunchScreen(store.get("sglang-tuned"), store=store, running=running)
    async with FormApp(screen).run_test(size=(120, 50)) as pilot:
        await settle(pilot)
        lines = [m.text for m in screen.query_one(PresetForm).messages if m.key == "vs running"]
        assert "+ --attention-backend=flashinfer" in lines and "+ env NCCL_PROTO=LL" in lines


async def test_demo_form_reads_backends_from_the_simulator(store):
    from tunedeck.sim.demo import demo_host

    screen = LaunchScreen(store.get("sglang-tuned"), store=store, host=demo_host(), demo=True)
    app = FormApp(screen)
    async with app.run_test(size=(120, 50)) as pilot:
        await settle(pilot)
        await app.workers.wait_for_complete()
        await settle(pilot)
        form = screen.query_one(PresetForm)
        assert " tunedeck sim sglang --model-path=" in form.preview_text
        assert "NCCL_PROTO=LL" in form.preview_text
        values = [v for _, v in screen.query_one("#backend", Select)._options]
        assert "flashinfer" in values and "cutlass_mla" not in values
        assert "demo" in str(screen.query_one("#backend-source").content)


async def test_attention_preset_sets_the_backends(store):
    screen = LaunchScreen(store.get("sglang-base"), store=store)
    async with FormApp(screen).run_test(size=(120, 50)) as pilot:
        await settle(pilot)
        form = screen.query_one(PresetForm)
        screen.query_one("#attention-preset", Select).value = "fa3-prefill-flashmla-decode"
        await settle(pilot)
        assert screen.query_one("#prefill", Select).value == "fa3"
        assert "--prefill-attention-backend=fa3 --decode-attention-backend=flashmla" in form.preview_text
        screen.query_one("#attention-preset", Select).value = "triton"
        await settle(pilot)
        assert "--attention-backend=triton" in form.preview_text and "prefill-attention" not in form.preview_text
        # presets follow the engine
        screen.query_one("#engine", Select).value = "vllm"
        await settle(pilot)
        names = [v for _, v in screen.query_one("#attention-preset", Select)._options]
        assert "FLASH_ATTN_MLA" in names and "fa3" not in names
