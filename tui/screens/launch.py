"""The launch screen: edit a profile in :class:`~widgets.preset_form.PresetForm`, see the exact command
and what it changes against the running server, check it on the host, save it, or ask to launch it.

Launching itself belongs to the launcher: this screen posts :class:`LaunchScreen.LaunchRequested`
(which bubbles to the App) with the validated profile and its command.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer

from tui.profiles.builder import Command, Issue, check_profile
from tui.profiles.diff import diff_commands
from tui.profiles.formtext import env_to_text, flags_to_text, text_to_env, text_to_flags
from tui.profiles.model import DEFAULT_PORTS, ProfileError, ServerProfile, dangerous_names
from tui.profiles.schema import BUILTIN_BACKENDS
from tui.profiles.store import ProfileStore
from widgets.preset_form import AttentionChoice, FormChoices, FormMessage, FormValues, NcclChoice, PresetForm


def form_values(p: ServerProfile) -> FormValues:
    return FormValues(
        name=p.name, engine=p.engine, model=p.model, tp=str(p.tp), port=str(p.port) if p.port else "",
        bind=p.host, backend=p.attention_backend, prefill=p.prefill_backend, decode=p.decode_backend,
        nccl_preset=p.nccl_preset, nccl_overrides=env_to_text(p.nccl_overrides), flags=flags_to_text(p.flags),
        extra_args=p.extra_args, env=env_to_text(p.env), confirm_dangerous=bool(p.confirm_dangerous),
        read_only=p.read_only,
    )


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
    env, p1 = text_to_env(v.env, "env")
    over, p2 = text_to_env(v.nccl_overrides, "nccl.overrides")
    flags, p3 = text_to_flags(v.flags, v.engine)
    issues += [Issue("error", k, m) for k, m in p1 + p2 + p3]
    if issues:
        return None, issues
    engine_changed = v.engine != base.engine
    p = replace(
        base, engine=v.engine, model=v.model.strip(), tp=tp, port=port, host=v.bind.strip(),
        attention_backend=v.backend, prefill_backend=v.prefill if v.engine == "sglang" else "",
        decode_backend=v.decode if v.engine == "sglang" else "", nccl_preset=v.nccl_preset,
        nccl_overrides=over, flags=flags, extra_args=v.extra_args, env=env,
        speculative=None if engine_changed else base.speculative,
    )
    p = replace(p, confirm_dangerous=tuple(dangerous_names(p)) if v.confirm_dangerous else ())
    return p, []


class LaunchScreen(Screen):
    """Edit, check, save and launch a server profile."""

    BINDINGS = [
        Binding("ctrl+s", "save", "Save", id="profile-save"),
        Binding("ctrl+l", "launch", "Launch", id="profile-launch"),
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
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        self.store = store or ProfileStore()
        self.profile = profile or ServerProfile(name="new-profile", engine="sglang", model="")
        self.host = host
        self.demo = demo
        self.running = running
        #: the command for the current form values (None while there are errors)
        self.command: Command | None = None
        #: the profile for the current form values
        self.current: ServerProfile | None = self.profile
        self._host_backends: dict[str, tuple[str, ...]] = {}
        self._nccl = {p.name: p for p in self.store.nccl_presets()}

    # ------------------------------------------------------------------ setup
    def _choices(self) -> FormChoices:
        backends = {e: self._host_backends.get(e, BUILTIN_BACKENDS[e]) for e in BUILTIN_BACKENDS}
        source = (f"{self.host.target if self.host else 'host'}'s {', '.join(self._host_backends)}"
                  if self._host_backends else "tunedeck's built-in list")
        nccl = tuple(NcclChoice(p.name, p.description, p.warning, p.vars) for p in self._nccl.values())
        attention = tuple(
            AttentionChoice(a.engine, a.name, a.backend, a.prefill, a.decode, a.description)
            for a in self.store.attention_presets()
        )
        return FormChoices(backends=tuple(backends.items()), source=source, nccl=nccl, attention=attention)

    def compose(self) -> ComposeResult:
        yield PresetForm(form_values(self.profile), self._choices(), id="form")
        yield Footer()

    def on_mount(self) -> None:
        self.title = f"Launch: {self.profile.name}"
        if self.host is not None:
            self.read_host_backends(self.profile)

    @property
    def form(self) -> PresetForm:
        return self.query_one("#form", PresetForm)

    # ------------------------------------------------------------------ host facts
    @work(group="launch-probe", exclusive=True, exit_on_error=False)
    async def read_host_backends(self, profile: ServerProfile) -> None:
        from tui.profiles.preflight import probe_host

        try:
            facts = await probe_host(self.host, profile, demo=self.demo)
        except Exception as e:  # the built-in choices stay; say why
            self.notify(f"Could not read the engine's backends: {e}", severity="warning")
            return
        if facts.backends and facts.backends_source != "builtin":
            self._host_backends[profile.engine] = tuple(facts.backends)
            self.form.set_choices(self._choices())

    @work(group="launch-preflight", exclusive=True, exit_on_error=False)
    async def run_preflight(self, profile: ServerProfile) -> None:
        from tui.profiles.preflight import preflight

        try:
            report = await preflight(self.host, profile, demo=self.demo, store=self.store)
        except Exception as e:  # HostError, UnsafeInput: the host's state, shown inline
            self.form.show_messages([FormMessage("error", "host", f"pre-flight failed: {e}")])
            return
        if report.facts.backends and report.facts.backends_source != "builtin":
            self._host_backends[profile.engine] = tuple(report.facts.backends)
            self.form.set_choices(self._choices())
        self.form.show_messages([FormMessage(f.severity, f.subject, f.message) for f in report.findings])

    # ------------------------------------------------------------------ validation
    def _evaluate(self, values: FormValues) -> tuple[ServerProfile | None, Command | None, list[FormMessage]]:
        profile, issues = profile_from_values(self.profile, values)
        cmd = None
        if profile is not None:
            nccl = self._nccl.get(profile.nccl_preset)
            if nccl is None:
                known = ", ".join(self._nccl)
                issues.append(Issue("error", "nccl.preset", f"unknown NCCL preset {profile.nccl_preset!r} (known: {known})"))
            else:
                cmd, more = check_profile(profile, nccl=nccl, demo=self.demo)
                issues += more
        msgs = [FormMessage(i.severity, i.key, i.message) for i in issues]
        if cmd is not None and self.running is not None:
            d = diff_commands(self.running, cmd)
            msgs += [FormMessage("info", "vs running", line) for line in d.lines()] or [
                FormMessage("info", "vs running", "no change")
            ]
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
        if engine_switched and self.host is not None and profile is not None:
            self.read_host_backends(profile)

    # ------------------------------------------------------------------ actions
    @on(PresetForm.SaveRequested)
    def _save(self, event: PresetForm.SaveRequested) -> None:
        profile, cmd, msgs = self._evaluate(event.values)
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
        self.form.set_values(form_values(saved))
        self.notify(f"Saved {saved.path}", title="Profile saved")

    @on(PresetForm.LaunchRequested)
    def _launch(self, event: PresetForm.LaunchRequested) -> None:
        profile, cmd, msgs = self._evaluate(event.values)
        if profile is None or cmd is None:
            self.form.show_messages(msgs)
            self.notify("Fix the errors before launching", severity="error")
            return
        self.post_message(self.LaunchRequested(profile, cmd))

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

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()
