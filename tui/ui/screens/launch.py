"""The launch screen: edit a profile in :class:`~tunedeck.widgets.preset_form.PresetForm`, see the exact command
and what it changes against the running server, check it on the host, save it, or ask to launch it.

Launching itself belongs to the launcher: this screen posts :class:`LaunchScreen.LaunchRequested`
(which bubbles to the App) with the validated profile and its command.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import Footer, Static

from tunedeck.profiles.builder import Command, Issue, check_profile
from tunedeck.profiles.diff import diff_commands
from tunedeck.profiles.formtext import env_to_text, flags_to_text, text_to_env, text_to_flags
from tunedeck.profiles.model import DEFAULT_PORTS, ProfileError, ServerProfile, Speculative, dangerous_names
from tunedeck.profiles.schema import BUILTIN_BACKENDS
from tunedeck.profiles.store import ProfileStore
from tunedeck.ui.screens.hosted import HostScreen
from tunedeck.ui.screens.modals import ConfirmModal
from tunedeck.widgets.preset_form import AttentionChoice, FormChoices, FormMessage, FormValues, NcclChoice, PresetForm

log = logging.getLogger(__name__)

#: attention backends for hardware other than NVIDIA GPUs: hidden once the host's GPUs are known
FOREIGN_BACKENDS = {
    "ascend": "Huawei Ascend NPUs",
    "intel_xpu": "Intel GPUs",
    "intel_amx": "Intel CPUs (AMX)",
    "aiter": "AMD GPUs (ROCm)",
    "wave": "AMD GPUs (ROCm)",
    "ROCM_ATTN": "AMD GPUs (ROCm)",
    "ROCM_AITER_FA": "AMD GPUs (ROCm)",
    "ROCM_AITER_MLA": "AMD GPUs (ROCm)",
    "CPU_ATTN": "CPUs",
}


def runnable_backends(names: tuple[str, ...], gpus: tuple[Any, ...] | None) -> tuple[tuple[str, ...], int]:
    """The backends that can run on ``gpus`` (NVIDIA: the vendor-specific ones of other hardware
    are dropped) and how many were dropped. Unknown GPUs: every name stays."""
    if not gpus or not all(
        "nvidia" in str(getattr(g, "name", "")).lower() or getattr(g, "compute_cap", "") for g in gpus
    ):
        return names, 0
    kept = tuple(n for n in names if n not in FOREIGN_BACKENDS)
    return kept, len(names) - len(kept)


def form_values(p: ServerProfile) -> FormValues:
    return FormValues(
        name=p.name,
        engine=p.engine,
        model=p.model,
        tp=str(p.tp),
        port=str(p.port) if p.port else "",
        bind=p.host,
        backend=p.attention_backend,
        prefill=p.prefill_backend,
        decode=p.decode_backend,
        nccl_preset=p.nccl_preset,
        nccl_overrides=env_to_text(p.nccl_overrides),
        flags=flags_to_text(p.flags),
        extra_args=p.extra_args,
        env=env_to_text(p.env),
        confirm_dangerous=bool(p.confirm_dangerous),
        read_only=p.read_only,
        **_spec_values(p.speculative),
    )


def _spec_values(s: Speculative | None) -> dict[str, str]:
    if s is None:
        return {}
    return {
        "spec_algorithm": s.algorithm,
        "spec_draft_model": s.draft_model,
        "spec_num_steps": "" if s.num_steps is None else str(s.num_steps),
        "spec_eagle_topk": "" if s.eagle_topk is None else str(s.eagle_topk),
        "spec_num_draft_tokens": "" if s.num_draft_tokens is None else str(s.num_draft_tokens),
    }


def profile_from_values(base: ServerProfile, v: FormValues) -> tuple[ServerProfile | None, list[Issue]]:
    """Apply form values to ``base``; text that cannot even be parsed gives issues and no profile."""
    issues: list[Issue] = []

    def intval(text: str, key: str, default: int) -> int:
        text = text.strip()
        if not text:
            return default
        try:
            return int(text)
        except ValueError:
            issues.append(Issue("error", key, f"expected a whole number, got {text!r}"))
            return default

    tp = intval(v.tp, "tp", 0)
    port = intval(v.port, "port", 0)

    def optint(text: str, key: str) -> int | None:
        return intval(text, key, 0) or None if text.strip() else None

    spec = None
    if v.spec_algorithm.strip() or v.spec_draft_model.strip():
        spec = Speculative(
            algorithm=v.spec_algorithm.strip(),
            draft_model=v.spec_draft_model.strip(),
            num_steps=optint(v.spec_num_steps, "speculative.num_steps"),
            eagle_topk=optint(v.spec_eagle_topk, "speculative.eagle_topk"),
            num_draft_tokens=optint(v.spec_num_draft_tokens, "speculative.num_draft_tokens"),
        )
    env, p1 = text_to_env(v.env, "env")
    over, p2 = text_to_env(v.nccl_overrides, "nccl.overrides")
    flags, p3 = text_to_flags(v.flags, v.engine)
    issues += [Issue("error", k, m) for k, m in p1 + p2 + p3]
    if issues:
        return None, issues
    p = replace(
        base,
        engine=v.engine,
        model=v.model.strip(),
        tp=tp,
        port=port,
        host=v.bind.strip(),
        attention_backend=v.backend,
        prefill_backend=v.prefill if v.engine == "sglang" else "",
        decode_backend=v.decode if v.engine == "sglang" else "",
        nccl_preset=v.nccl_preset,
        nccl_overrides=over,
        flags=flags,
        extra_args=v.extra_args,
        env=env,
        speculative=spec,
    )
    p = replace(p, confirm_dangerous=tuple(dangerous_names(p)) if v.confirm_dangerous else ())
    return p, []


class LaunchScreen(HostScreen):
    """Edit, check, save and launch a server profile.

    The title line names the profile, says where it lives (a built-in is read-only: *Save as* keeps
    changes) and whether there are unsaved edits; ``escape`` with unsaved edits asks first. Launching
    (``ctrl+l`` or the button) runs the same pre-flight as ``L`` in the list: errors stop it,
    warnings ask (Cancel is the default)."""

    DEFAULT_CSS = """
    LaunchScreen #launch-title { height: 1; background: $boost; padding: 0 1; }
    """

    BINDINGS = [
        Binding("ctrl+s", "save", "Save", id="profile-save"),
        Binding("ctrl+l", "launch", "Launch", tooltip="Pre-flight, then launch", id="profile-launch"),
        Binding("ctrl+r", "preflight", "Pre-flight", tooltip="Check the form on the host", id="profile-preflight"),
        Binding("escape", "back", "Back", id="profile-back"),
    ]

    class LaunchRequested(Message):
        """Launch this profile (validated; ``command`` is what will run)."""

        def __init__(self, profile: ServerProfile, command: Command) -> None:
            super().__init__()
            #: the profile to launch
            self.profile = profile
            #: the exact command it builds to
            self.command = command

    def __init__(
        self,
        profile: ServerProfile | None = None,
        *,
        store: ProfileStore | None = None,
        host: Any = None,
        demo: bool = False,
        running: Command | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(host=host, demo=demo, **kwargs)
        self.store = store or ProfileStore()
        self.profile = profile or ServerProfile(name="new-profile", engine="sglang", model="")
        self.running = running
        #: the command for the current form values (None while there are errors)
        self.command: Command | None = None
        #: the profile for the current form values
        self.current: ServerProfile | None = self.profile
        self._host_backends: dict[str, tuple[str, ...]] = {}
        #: the host's GPUs once read (backends for other hardware are hidden)
        self._host_gpus: tuple[Any, ...] | None = None
        self._nccl = {p.name: p for p in self.store.nccl_presets()}
        #: True while a launch's pre-flight is under way
        self.launching = False

    # ------------------------------------------------------------------ setup
    def _choices(self) -> FormChoices:
        backends: dict[str, tuple[str, ...]] = {}
        hidden = 0
        for e in BUILTIN_BACKENDS:
            names, dropped = runnable_backends(self._host_backends.get(e, BUILTIN_BACKENDS[e]), self._host_gpus)
            backends[e] = names
            hidden += dropped if e == self.profile.engine else 0
        source = (
            f"{self.host.target if self.host else 'host'}'s {', '.join(self._host_backends)}"
            if self._host_backends
            else "tunedeck's built-in list"
        )
        if hidden and self._host_gpus:
            gpu = str(getattr(self._host_gpus[0], "name", "GPU"))
            source += f"; {hidden} for other hardware hidden ({gpu})"
        nccl = tuple(NcclChoice(p.name, p.description, p.warning, p.vars) for p in self._nccl.values())
        attention = tuple(
            AttentionChoice(a.engine, a.name, a.backend, a.prefill, a.decode, a.description)
            for a in self.store.attention_presets()
        )
        return FormChoices(backends=tuple(backends.items()), source=source, nccl=nccl, attention=attention)

    def compose(self) -> ComposeResult:
        yield Static(self._title_text(), id="launch-title")
        yield PresetForm(form_values(self.profile), self._choices(), id="form")
        yield Footer()

    def on_mount(self) -> None:
        self.title = f"Launch: {self.profile.name}"
        self._saved_command = self._command_for(self.profile)
        if self.host is not None:
            self.read_host_backends(self.profile)

    # ------------------------------------------------------------------ title / dirty state
    @property
    def is_new(self) -> bool:
        """True for a profile that has no file yet."""
        return not self.profile.path and self.profile.source != "builtin"

    @property
    def dirty(self) -> bool:
        """True when the form differs from the profile it opened with (or was last saved as)."""
        if not self.is_mounted:
            return False
        try:
            now = self.form.values
        except NoMatches:  # not composed yet
            return False
        return replace(now, name="") != replace(form_values(self.profile), name="")

    def _title_text(self) -> Text:
        p = self.profile
        t = Text()
        if self.is_new:
            t.append("New profile", style="bold")
        else:
            t.append("Profile ", style="dim")
            t.append(p.name, style="bold")
        if self.is_mounted and self.dirty:
            t.append(" · ● unsaved", style="bold yellow")
        if not self.is_new:
            if p.source == "builtin" or p.read_only:
                t.append(" · built-in, read-only: Save as keeps changes", style="yellow")
            elif p.path:
                t.append(f" · {p.path}", style="dim")
        t.no_wrap = True
        t.overflow = "ellipsis"
        return t

    def _show_title(self) -> None:
        try:
            self.query_one("#launch-title", Static).update(self._title_text())
        except NoMatches:  # not composed yet
            pass

    def _command_for(self, profile: ServerProfile) -> Command | None:
        nccl = self._nccl.get(profile.nccl_preset)
        if nccl is None:
            return None
        try:
            cmd, _ = check_profile(profile, nccl=nccl, demo=self.demo)
        except ProfileError:
            return None
        return cmd

    @property
    def form(self) -> PresetForm:
        return self.query_one("#form", PresetForm)

    # ------------------------------------------------------------------ host facts
    @work(group="launch-probe", exclusive=True, exit_on_error=False)
    async def read_host_backends(self, profile: ServerProfile) -> None:
        from tunedeck.profiles.hostfacts import probe_host

        try:
            facts = await probe_host(self.host, profile, demo=self.demo)
        except Exception as e:  # the built-in choices stay; say why
            log.warning("reading the engine's backends on %s failed", self.host, exc_info=True)
            self.notify(f"Could not read the engine's backends: {e}", severity="warning", markup=False)
            return
        if facts.gpus:
            self._host_gpus = tuple(facts.gpus)
        if facts.backends and facts.backends_source != "builtin":
            self._host_backends[profile.engine] = tuple(facts.backends)
        if facts.gpus or (facts.backends and facts.backends_source != "builtin"):
            self.form.set_choices(self._choices())

    @work(group="launch-preflight", exclusive=True, exit_on_error=False)
    async def run_preflight(self, profile: ServerProfile) -> None:
        from tunedeck.services.checks import preflight_for

        try:
            report = await preflight_for(
                self.host, profile, demo=self.demo, sim=bool(getattr(self.app, "sim", False)), store=self.store
            )
        except Exception as e:  # HostError, UnsafeInput: the host's state, shown inline
            log.warning("pre-flight on %s failed", self.host, exc_info=True)
            self.form.show_messages([FormMessage("error", "host", f"pre-flight failed: {e}")])
            return
        if report.facts.backends and report.facts.backends_source != "builtin":
            self._host_backends[profile.engine] = tuple(report.facts.backends)
            self.form.set_choices(self._choices())
        self.form.show_messages([FormMessage(f.severity, f.subject, f.detail) for f in report.findings])

    # ------------------------------------------------------------------ validation
    def _evaluate(self, values: FormValues) -> tuple[ServerProfile | None, Command | None, list[FormMessage]]:
        profile, issues = profile_from_values(self.profile, values)
        cmd = None
        if profile is not None:
            nccl = self._nccl.get(profile.nccl_preset)
            if nccl is None:
                known = ", ".join(self._nccl)
                issues.append(
                    Issue("error", "nccl.preset", f"unknown NCCL preset {profile.nccl_preset!r} (known: {known})")
                )
            else:
                cmd, more = check_profile(profile, nccl=nccl, demo=self.demo)
                issues += more
        msgs = [FormMessage(i.severity, i.key, i.message) for i in issues]
        if cmd is not None and self.running is not None:
            d = diff_commands(self.running, cmd)
            msgs += [FormMessage("info", "vs running", line) for line in d.lines()] or [
                FormMessage("info", "vs running", "no change")
            ]
        saved = getattr(self, "_saved_command", None)
        if cmd is not None and saved is not None and not self.is_new:
            d = diff_commands(saved, cmd)
            if not d.empty:
                msgs += [FormMessage("info", "vs saved", line) for line in d.lines()]
        if profile is not None and not profile.port:
            msgs.append(FormMessage("info", "port", f"engine default {DEFAULT_PORTS[profile.engine]}"))
        return profile, cmd, msgs

    @on(PresetForm.Changed)
    def _changed(self, event: PresetForm.Changed) -> None:
        profile, cmd, msgs = self._evaluate(event.values)
        engine_switched = self.current is not None and profile is not None and profile.engine != self.current.engine
        self.current, self.command = profile, cmd
        self.form.show_preview(cmd.display if cmd else "")
        self.form.show_messages(msgs)
        self._show_title()
        if engine_switched and self.host is not None and profile is not None:
            self.read_host_backends(profile)

    # ------------------------------------------------------------------ actions
    @on(PresetForm.SaveRequested)
    def _save(self, event: PresetForm.SaveRequested) -> None:
        profile, _cmd, msgs = self._evaluate(event.values)
        if profile is None:
            self.form.show_messages(msgs)
            self.notify("Fix the errors before saving", severity="error")
            return
        try:
            if event.as_name is None or (event.as_name == self.profile.name and self.profile.source == "user"):
                saved = self.store.save(profile)
            else:
                saved = self.store.save(profile.with_(source="", path=""), name=event.as_name)
        except ProfileError as e:
            self.form.show_messages([FormMessage("error", e.key or "save", e.message), *msgs])
            self.notify(e.message, severity="error", title="Not saved")
            return
        self.profile = saved
        self.title = f"Launch: {saved.name}"
        self._saved_command = self._command_for(saved)
        self.form.set_values(form_values(saved))
        self._show_title()
        self.notify(f"Saved {saved.path}", title="Profile saved")

    @on(PresetForm.LaunchRequested)
    def _launch(self, event: PresetForm.LaunchRequested) -> None:
        profile, cmd, msgs = self._evaluate(event.values)
        if profile is None or cmd is None:
            self.form.show_messages(msgs)
            self.notify("Fix the errors before launching", severity="error")
            return
        if self.host is None:
            self.notify("No host selected: launching needs a host (or the demo)", severity="warning")
            return
        if self.launching:
            return
        self.preflight_then_launch(profile)

    @work(group="launch-preflight", exclusive=True, exit_on_error=False)
    async def preflight_then_launch(self, profile: ServerProfile) -> None:
        """The same pre-flight as ``L`` in the list: errors stop the launch, warnings ask."""
        from tunedeck.ui.screens.profiles import checked_command

        self.launching = True
        self.form.show_messages([FormMessage("info", "pre-flight", f"checking {profile.name} on the host …")])
        try:

            def shown(report: Any) -> None:
                self.form.show_messages([FormMessage(f.severity, f.subject, f.detail) for f in report.findings])

            command = await checked_command(
                self,
                profile,
                store=self.store,
                on_report=shown,
                on_failure=lambda msg: self.form.show_messages([FormMessage("error", "host", msg)]),
            )
            if command is not None:
                self.post_message(self.LaunchRequested(profile, command))
        finally:
            self.launching = False

    @on(PresetForm.PreflightRequested)
    def _preflight(self, event: PresetForm.PreflightRequested) -> None:
        profile, _cmd, msgs = self._evaluate(event.values)
        if profile is None:
            self.form.show_messages(msgs)
            return
        if self.host is None:
            self.notify("No host selected: pre-flight needs a host (or the demo)", severity="warning")
            return
        self.run_preflight(profile)

    def action_save(self) -> None:
        self.form.post_message(PresetForm.SaveRequested(self.form.values, None))

    def action_launch(self) -> None:
        self.form.post_message(PresetForm.LaunchRequested(self.form.values))

    def action_preflight(self) -> None:
        self.form.post_message(PresetForm.PreflightRequested(self.form.values))

    def action_back(self) -> None:
        if len(self.app.screen_stack) <= 1:
            return
        if not self.dirty:
            self.app.pop_screen()
            return

        def answer(discard: bool | None) -> None:
            if discard and self.app.screen is self:
                self.app.pop_screen()

        what = "the new profile" if self.is_new else f"your changes to {self.profile.name}"
        self.app.push_screen(
            ConfirmModal(
                f"Discard {what}? They are not saved.",
                title="Unsaved changes",
                action="Discard",
                cancel="Keep editing",
                danger=True,
            ),
            answer,
        )
