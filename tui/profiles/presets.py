"""NCCL and attention-backend presets: the building blocks a server profile refers to by name.

A preset file (``presets/*.toml``) holds any number of presets::

    schema_version = 1

    [nccl.pcie]
    description = "..."
    warning = "..."               # shown wherever the preset is picked
    [nccl.pcie.vars]
    NCCL_PROTO = "LL"

    [attention.sglang.flashinfer]
    backend = "flashinfer"
    prefill = ""                  # SGLang per-phase overrides
    decode = ""
    description = "..."

The ``default`` NCCL preset (no variables: the engine's and NCCL's own defaults) always exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from tunedeck.profiles.model import (
    ENGINES,
    NAME_RE,
    SCHEMA_VERSION,
    AttentionPreset,
    NcclPreset,
)
from tunedeck.profiles.tomlread import ProfileError, TomlReader, parse_toml

DEFAULT_NCCL = NcclPreset(
    name="default",
    description="Engine defaults: tunedeck sets no NCCL variables.",
    source="builtin",
)

#: Shown on presets made of NCCL tuning variables (the NCCL guide files them under debugging).
DEBUG_KNOB_WARNING = (
    "NCCL documents these variables as debugging knobs, not for production: "
    "they can cause sub-optimal behaviour, crashes or hangs. Measure before keeping them."
)


def parse_preset_text(
    text: str, *, path: str | Path | None = None, source: str = ""
) -> tuple[list[NcclPreset], list[AttentionPreset]]:
    data = parse_toml(text, path)
    r = TomlReader(text, path)
    r.unknown(data, {"schema_version", "nccl", "attention"}, ())
    sv = data.get("schema_version", SCHEMA_VERSION)
    if isinstance(sv, bool) or not isinstance(sv, int) or not 1 <= sv <= SCHEMA_VERSION:
        raise r.err(("schema_version",), f"unsupported schema_version {sv!r} (this tunedeck reads {SCHEMA_VERSION})")
    nccl: list[NcclPreset] = []
    att: list[AttentionPreset] = []
    for name, body in r.table(data.get("nccl", {}), ("nccl",)).items():
        kp = ("nccl", name)
        if not NAME_RE.match(name):
            raise r.err(kp, f"invalid preset name {name!r}")
        body = r.table(body, kp)
        r.unknown(body, {"description", "warning", "vars"}, kp)
        nccl.append(
            NcclPreset(
                name=name,
                description=r.text_value(body.get("description", ""), kp + ("description",)),
                warning=r.text_value(body.get("warning", ""), kp + ("warning",)),
                vars=r.env_table(body.get("vars", {}), kp + ("vars",)),
                source=source,
            )
        )
    for engine, presets in r.table(data.get("attention", {}), ("attention",)).items():
        if engine not in ENGINES:
            raise r.err(("attention", engine), f"unknown engine {engine!r} (expected sglang or vllm)")
        for name, body in r.table(presets, ("attention", engine)).items():
            ap = ("attention", engine, name)
            if not NAME_RE.match(name):
                raise r.err(ap, f"invalid preset name {name!r}")
            body = r.table(body, ap)
            r.unknown(body, {"backend", "prefill", "decode", "description"}, ap)
            vals = {
                k: r.text_value(body.get(k, ""), ap + (k,)) for k in ("backend", "prefill", "decode", "description")
            }
            if engine == "vllm" and (vals["prefill"] or vals["decode"]):
                raise r.err(
                    ap + ("prefill" if vals["prefill"] else "decode",), "per-phase backends exist only on SGLang"
                )
            att.append(AttentionPreset(name=name, engine=engine, source=source, **vals))
    return nccl, att


def load_preset_file(path: str | Path, *, source: str) -> tuple[list[NcclPreset], list[AttentionPreset]]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"cannot read: {e}", path=p) from None
    return parse_preset_text(text, path=p, source=source)


def preset_jsonable(p: NcclPreset | AttentionPreset) -> dict[str, Any]:
    if isinstance(p, NcclPreset):
        return {
            "name": p.name,
            "description": p.description,
            "warning": p.warning,
            "vars": dict(p.vars),
            "source": p.source,
        }
    return {
        "name": p.name,
        "engine": p.engine,
        "backend": p.backend,
        "prefill": p.prefill,
        "decode": p.decode,
        "description": p.description,
        "source": p.source,
    }


def merge_nccl(preset: NcclPreset, overrides: Mapping[str, str] | tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Preset variables, then per-variable overrides (an empty override removes the variable)."""
    out = dict(preset.vars)
    items = overrides.items() if isinstance(overrides, Mapping) else overrides
    for k, v in items:
        if v == "":
            out.pop(k, None)
        else:
            out[k] = v
    return out
