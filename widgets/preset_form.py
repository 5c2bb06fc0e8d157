"""The launch form: edit a server profile as plain values, see the exact command, save or launch.

This widget knows nothing about profiles on disk or hosts: it takes :class:`FormValues` and
:class:`FormChoices` (plain frozen data) and posts intents (:class:`PresetForm.Changed`,
:class:`PresetForm.SaveRequested`, :class:`PresetForm.LaunchRequested`,
:class:`PresetForm.PreflightRequested`). The screen turns values into a profile, builds the
command and hands back the preview text and validation messages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from tunedeck.widgets.field_input import FieldInput

AUTO = ""  # the backend value meaning "let the engine choose"


@dataclass(frozen=True, slots=True)
class FormValues:
    """Everything the form edits, as the user typed it (numbers stay text until validated)."""

    name: str = ""
    engine: str = "sglang"
    model: str = ""
    tp: str = "8"
    port: str = ""
    bind: str = "127.0.0.1"
    backend: str = AUTO
    prefill: str = AUTO
    decode: str = AUTO
    nccl_preset: str = "default"
    #: ``NAME=VALUE`` tokens, shell-quoted where needed (``NAME=`` removes a preset variable)
    nccl_overrides: str = ""
    #: ``--flag=value`` / ``--switch`` tokens of the profile's flag table
    flags: str = ""
    extra_args: str = ""
    #: ``NAME=VALUE`` tokens
    env: str = ""
    confirm_dangerous: bool = False
    read_only: bool = False
    #: speculative decoding ('' algorithm: off); numbers stay text until validated
    spec_algorithm: str = ""
    spec_draft_model: str = ""
    spec_num_steps: str = ""
    spec_eagle_topk: str = ""
    spec_num_draft_tokens: str = ""


@dataclass(frozen=True, slots=True)
class NcclChoice:
    name: str
    description: str = ""
    warning: str = ""
    vars: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class AttentionChoice:
    engine: str
    name: str
    backend: str = ""
    prefill: str = ""
    decode: str = ""
    description: str = ""


@dataclass(frozen=True, slots=True)
class FormChoices:
    """Choices for the Selects. ``backends`` per engine; ``source`` says where they came from."""

    backends: tuple[tuple[str, tuple[str, ...]], ...] = ()
    source: str = "built-in list"
    nccl: tuple[NcclChoice, ...] = (NcclChoice("default"),)
    attention: tuple[AttentionChoice, ...] = ()

    def backends_for(self, engine: str) -> tuple[str, ...]:
        return dict(self.backends).get(engine, ())

    def attention_for(self, engine: str) -> tuple[AttentionChoice, ...]:
        return tuple(a for a in self.attention if a.engine == engine)


@dataclass(frozen=True, slots=True)
class FormMessage:
    severity: str  # error | warning | info
    key: str
    text: str


class PresetForm(Widget):
    """Engine, model, TP, port, attention backends, NCCL preset + overrides, flags, env; live preview."""

    DEFAULT_CSS = """
    PresetForm { height: 1fr; }
    PresetForm #fields { height: 1fr; }
    PresetForm #messages-box { height: auto; max-height: 8; }
    PresetForm .row { height: auto; margin: 0 0 0 0; }
    PresetForm .row > Label { width: 18; padding: 1 1 0 0; text-align: right; }
    PresetForm .row > Input { width: 1fr; }
    PresetForm .row > Select { width: 1fr; }
    PresetForm #nccl-info { color: $text-muted; padding: 0 0 0 18; height: auto; }
    PresetForm #preview { border: round $accent; border-title-align: left; padding: 0 1; height: auto; min-height: 3; }
    PresetForm #messages { padding: 0 1; height: auto; }
    PresetForm #buttons { height: auto; padding: 1 0 0 0; }
    PresetForm #buttons Button { margin: 0 1 0 0; }
    PresetForm #save-as-name { width: 30; }
    PresetForm #confirm-dangerous { display: none; }
    PresetForm #confirm-dangerous.-shown { display: block; }
    /* a short terminal (80x24): one row a field, so the size fields and the buttons stay in view */
    PresetForm.-short .row > Label { padding: 0 1 0 0; }
    PresetForm.-short .row > Input { border: none; height: 1; padding: 0 1; }
    PresetForm.-short .row > Select > SelectCurrent { border: none; height: 1; padding: 0 1; }
    PresetForm.-short .row > Select { height: auto; }
    PresetForm.-short #nccl-info { max-height: 2; }
    PresetForm.-short #preview { max-height: 6; }
    PresetForm.-short #messages-box { max-height: 3; }
    PresetForm.-short #buttons { padding: 0; }
    PresetForm.-short #buttons Button { border: none; height: 1; }
    PresetForm.-short #buttons #save-as-name { border: none; height: 1; }
    /* a narrow one: every button on the line */
    PresetForm.-narrow #buttons Button { min-width: 8; width: auto; }
    PresetForm.-narrow #save-as-name { width: 16; }
    """
    #: below this many rows the form is compact (one row a field)
    SHORT_ROWS = 32
    #: below this many columns the buttons are narrow
    NARROW_COLUMNS = 110

    class Changed(Message):
        """Any field changed; ``values`` is the whole form."""

        def __init__(self, form: "PresetForm", values: FormValues) -> None:
            super().__init__()
            #: the form that changed
            self.form = form
            #: all current values
            self.values = values

        @property
        def control(self) -> "PresetForm":
            return self.form

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, PresetForm.Changed) and message.form is self.form

    class SaveRequested(Message):
        """Save (``as_name`` None) or save as ``as_name``."""

        def __init__(self, values: FormValues, as_name: str | None) -> None:
            super().__init__()
            #: the values to save
            self.values = values
            #: the new name for "save as", None for "save"
            self.as_name = as_name

    class LaunchRequested(Message):
        """The user asked to launch these values."""

        def __init__(self, values: FormValues) -> None:
            super().__init__()
            #: the values to launch
            self.values = values

    class PreflightRequested(Message):
        """The user asked for a pre-flight check of these values on the host."""

        def __init__(self, values: FormValues) -> None:
            super().__init__()
            #: the values to check
            self.values = values

    def __init__(
        self,
        values: FormValues | None = None,
        choices: FormChoices | None = None,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._values = values or FormValues()
        self._choices = choices or FormChoices()
        self._engine = self._values.engine
        #: the preview text as last shown (for tests and copy)
        self.preview_text = ""
        #: the validation messages as last shown
        self.messages: tuple[FormMessage, ...] = ()

    # ------------------------------------------------------------------ layout
    def _backend_options(self, engine: str, current: str = AUTO) -> list[tuple[str, str]]:
        names = list(self._choices.backends_for(engine))
        opts = [("auto (engine picks)", AUTO)] + [(n, n) for n in names]
        if current and current not in names:
            opts.append((f"{current} (not offered)", current))
        return opts

    def _attention_options(self, engine: str) -> list[tuple[str, str]]:
        return [("(pick a preset)", "")] + [
            (f"{a.name}: {a.description}" if a.description else a.name, a.name)
            for a in self._choices.attention_for(engine)
        ]

    def _nccl_options(self, current: str) -> list[tuple[str, str]]:
        names = [c.name for c in self._choices.nccl]
        opts = [(n, n) for n in names]
        if current and current not in names:
            opts.append((f"{current} (unknown)", current))
        return opts

    def compose(self) -> ComposeResult:
        v = self._values
        with VerticalScroll(id="fields"):
            with Horizontal(classes="row"):
                yield Label("Engine")
                yield Select([("SGLang", "sglang"), ("vLLM", "vllm")], value=v.engine, allow_blank=False, id="engine")
            with Horizontal(classes="row"):
                yield Label("Model path")
                yield FieldInput(v.model, id="model", placeholder="org/model or /models/path")
            with Horizontal(classes="row"):
                yield Label("Tensor parallel")
                yield FieldInput(v.tp, id="tp", type="integer")
                yield Label("Port")
                yield FieldInput(v.port, id="port", type="integer", placeholder="engine default")
                yield Label("Bind address")
                yield FieldInput(v.bind, id="bind")
            with Horizontal(classes="row"):
                yield Label("Attention preset")
                yield Select(self._attention_options(v.engine), value="", allow_blank=False, id="attention-preset")
            with Horizontal(classes="row"):
                yield Label("Attention")
                yield Select(
                    self._backend_options(v.engine, v.backend), value=v.backend, allow_blank=False, id="backend"
                )
            with Horizontal(classes="row", id="phase-row"):
                yield Label("Prefill / decode")
                yield Select(
                    self._backend_options(v.engine, v.prefill), value=v.prefill, allow_blank=False, id="prefill"
                )
                yield Select(self._backend_options(v.engine, v.decode), value=v.decode, allow_blank=False, id="decode")
            yield Static("", id="backend-source", classes="row")
            with Horizontal(classes="row"):
                yield Label("NCCL preset")
                yield Select(self._nccl_options(v.nccl_preset), value=v.nccl_preset, allow_blank=False, id="nccl")
            yield Static("", id="nccl-info")
            with Horizontal(classes="row"):
                yield Label("NCCL overrides")
                yield FieldInput(
                    v.nccl_overrides, id="nccl-overrides", placeholder="NCCL_BUFFSIZE=8388608  (NAME= removes)"
                )
            with Horizontal(classes="row"):
                yield Label("Flags")
                yield FieldInput(v.flags, id="flags", placeholder="--mem-fraction-static=0.85 --enable-metrics")
            with Horizontal(classes="row"):
                yield Label("Extra args")
                yield FieldInput(v.extra_args, id="extra-args", placeholder="free text, checked token by token")
            with Horizontal(classes="row"):
                yield Label("Environment")
                yield FieldInput(v.env, id="env", placeholder="NAME=value NAME2='with spaces'")
            with Horizontal(classes="row"):
                yield Label("Speculative")
                yield FieldInput(v.spec_algorithm, id="spec-algorithm", placeholder="off, or EAGLE3 / NGRAM / eagle3 …")
                yield Label("Draft model")
                yield FieldInput(v.spec_draft_model, id="spec-draft-model", placeholder="org/draft-model")
            with Horizontal(classes="row"):
                yield Label("Spec steps")
                yield FieldInput(v.spec_num_steps, id="spec-num-steps", type="integer", placeholder="engine default")
                yield Label("Top-k")
                yield FieldInput(v.spec_eagle_topk, id="spec-eagle-topk", type="integer", placeholder="default")
                yield Label("Draft tokens")
                yield FieldInput(
                    v.spec_num_draft_tokens, id="spec-num-draft-tokens", type="integer", placeholder="default"
                )
            yield Checkbox(
                "Allow dangerous variables (LD_PRELOAD, PATH, PYTHONPATH…)", v.confirm_dangerous, id="confirm-dangerous"
            )
        yield Static("", id="preview", markup=False)
        with VerticalScroll(id="messages-box"):
            yield Static("", id="messages", markup=False)
        with Horizontal(id="buttons"):
            yield Button("Save", id="save", variant="primary", disabled=v.read_only)
            yield FieldInput(v.name, id="save-as-name", placeholder="new name")
            yield Button("Save as", id="save-as")
            yield Button("Pre-flight", id="preflight")
            yield Button("Launch", id="launch", variant="success")

    def on_resize(self, event: events.Resize) -> None:
        self._fit()

    def _fit(self) -> None:
        size = self.app.size
        self.set_class(size.height < self.SHORT_ROWS, "-short")
        self.set_class(size.width < self.NARROW_COLUMNS, "-narrow")

    def on_mount(self) -> None:
        self._fit()
        self.query_one("#preview", Static).border_title = "Command"
        self._refresh_static()
        self.post_message(self.Changed(self, self.values))

    # ------------------------------------------------------------------ values
    @property
    def values(self) -> FormValues:
        if not self.is_mounted:
            return self._values

        def sel(id_: str) -> str:
            val = self.query_one(f"#{id_}", Select).value
            return "" if val is Select.NULL else str(val)

        def inp(id_: str) -> str:
            return self.query_one(f"#{id_}", Input).value

        return replace(
            self._values,
            engine=sel("engine") or "sglang",
            model=inp("model"),
            tp=inp("tp"),
            port=inp("port"),
            bind=inp("bind"),
            backend=sel("backend"),
            prefill=sel("prefill"),
            decode=sel("decode"),
            nccl_preset=sel("nccl"),
            nccl_overrides=inp("nccl-overrides"),
            flags=inp("flags"),
            extra_args=inp("extra-args"),
            env=inp("env"),
            confirm_dangerous=self.query_one("#confirm-dangerous", Checkbox).value,
            spec_algorithm=inp("spec-algorithm"),
            spec_draft_model=inp("spec-draft-model"),
            spec_num_steps=inp("spec-num-steps"),
            spec_eagle_topk=inp("spec-eagle-topk"),
            spec_num_draft_tokens=inp("spec-num-draft-tokens"),
        )

    def set_values(self, values: FormValues) -> None:
        """Replace every field (e.g. after loading or saving a profile)."""
        self._values = values
        if not self.is_mounted:
            return
        with self.prevent(Input.Changed, Select.Changed, Checkbox.Changed):
            self._engine = values.engine
            self.query_one("#engine", Select).value = values.engine
            self._set_backend_options(values.engine, values)
            self._reset_attention_presets(values.engine)
            self.query_one("#nccl", Select).set_options(self._nccl_options(values.nccl_preset))
            self.query_one("#nccl", Select).value = values.nccl_preset
            for id_, text in (
                ("model", values.model),
                ("tp", values.tp),
                ("port", values.port),
                ("bind", values.bind),
                ("nccl-overrides", values.nccl_overrides),
                ("flags", values.flags),
                ("extra-args", values.extra_args),
                ("env", values.env),
                ("save-as-name", values.name),
                ("spec-algorithm", values.spec_algorithm),
                ("spec-draft-model", values.spec_draft_model),
                ("spec-num-steps", values.spec_num_steps),
                ("spec-eagle-topk", values.spec_eagle_topk),
                ("spec-num-draft-tokens", values.spec_num_draft_tokens),
            ):
                self.query_one(f"#{id_}", Input).value = text
            self.query_one("#confirm-dangerous", Checkbox).value = values.confirm_dangerous
        self.query_one("#save", Button).disabled = values.read_only
        self._refresh_static()
        self.post_message(self.Changed(self, self.values))

    def set_choices(self, choices: FormChoices) -> None:
        """New backend / NCCL choices (e.g. read from the host's engine); keeps the current values."""
        current = self.values
        self._choices = choices
        if not self.is_mounted:
            return
        with self.prevent(Select.Changed):
            self._set_backend_options(current.engine, current)
            self._reset_attention_presets(current.engine)
            self.query_one("#nccl", Select).set_options(self._nccl_options(current.nccl_preset))
            self.query_one("#nccl", Select).value = current.nccl_preset
        self._refresh_static()

    def _reset_attention_presets(self, engine: str) -> None:
        sel = self.query_one("#attention-preset", Select)
        sel.set_options(self._attention_options(engine))
        sel.value = ""

    def _set_backend_options(self, engine: str, values: FormValues) -> None:
        for id_, cur in (("backend", values.backend), ("prefill", values.prefill), ("decode", values.decode)):
            s = self.query_one(f"#{id_}", Select)
            s.set_options(self._backend_options(engine, cur))
            s.value = cur
        sglang = engine == "sglang"
        self.query_one("#prefill", Select).disabled = not sglang
        self.query_one("#decode", Select).disabled = not sglang

    def show_preview(self, text: str) -> None:
        self.preview_text = text
        self.query_one("#preview", Static).update(text or "(no command: fix the errors below)")

    def show_messages(self, messages: tuple[FormMessage, ...] | list[FormMessage]) -> None:
        self.messages = tuple(messages)
        mark = {"error": "✗", "warning": "!", "info": "·"}
        lines = [f"{mark.get(m.severity, '?')} {m.key + ': ' if m.key else ''}{m.text}" for m in self.messages]
        self.query_one("#messages", Static).update("\n".join(lines))
        dangerous = any("changes what gets executed" in m.text for m in self.messages)
        self.query_one("#confirm-dangerous", Checkbox).set_class(
            dangerous or self.query_one("#confirm-dangerous", Checkbox).value, "-shown"
        )
        self.query_one("#launch", Button).disabled = any(m.severity == "error" for m in self.messages)

    def _refresh_static(self) -> None:
        v = self.values
        nccl = next((c for c in self._choices.nccl if c.name == v.nccl_preset), None)
        if nccl is None:
            info = f"unknown preset {v.nccl_preset!r}"
        else:
            vars_ = " ".join(f"{k}={val}" for k, val in nccl.vars) or "no variables"
            info = f"{nccl.description}\n{vars_}" if nccl.description else vars_
            if nccl.warning:
                info += f"\n⚠ {nccl.warning}"
        self.query_one("#nccl-info", Static).update(info)
        self.query_one("#backend-source", Static).update(f"                  backends from {self._choices.source}")

    # ------------------------------------------------------------------ events
    @on(Select.Changed, "#engine")
    def _engine_changed(self, event: Select.Changed) -> None:
        event.stop()
        v = self.values
        if v.engine == self._engine:
            return
        self._engine = v.engine
        keep = replace(v, backend=AUTO, prefill=AUTO, decode=AUTO)
        with self.prevent(Select.Changed):
            self._set_backend_options(v.engine, keep)
            self._reset_attention_presets(v.engine)
        self.post_message(self.Changed(self, self.values))

    @on(Select.Changed, "#attention-preset")
    def _attention_preset(self, event: Select.Changed) -> None:
        event.stop()
        name = event.value
        if not name or name is Select.NULL:
            return
        v = self.values
        preset = next((a for a in self._choices.attention_for(v.engine) if a.name == name), None)
        if preset is None:
            return
        with self.prevent(Select.Changed):
            self._set_backend_options(
                v.engine, replace(v, backend=preset.backend, prefill=preset.prefill, decode=preset.decode)
            )
        self.post_message(self.Changed(self, self.values))

    @on(Select.Changed)
    @on(Input.Changed)
    @on(Checkbox.Changed)
    def _field_changed(self, event: Message) -> None:
        event.stop()
        control = getattr(event, "control", None)
        if control is not None and control.id == "save-as-name":
            return
        if control is not None and control.id == "nccl":
            self._refresh_static()
        self.post_message(self.Changed(self, self.values))

    @on(Button.Pressed)
    def _button(self, event: Button.Pressed) -> None:
        event.stop()
        v = self.values
        if event.button.id == "save":
            self.post_message(self.SaveRequested(v, None))
        elif event.button.id == "save-as":
            self.post_message(self.SaveRequested(v, self.query_one("#save-as-name", Input).value.strip()))
        elif event.button.id == "launch":
            self.post_message(self.LaunchRequested(v))
        elif event.button.id == "preflight":
            self.post_message(self.PreflightRequested(v))
