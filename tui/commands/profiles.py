"""``tunedeck profiles``: list, show, check, print the exact launch command, diff two profiles."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, TextIO

from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._cli import (
    add_dangerous_env_option,
    add_profile_argument,
    json_actions,
    noted_table,
    target_label,
)
from tunedeck.fmt import text_table
from tunedeck.profiles.builder import Issue, build_command, check_profile, line_of_key, resolve_nccl
from tunedeck.profiles.diff import diff_commands
from tunedeck.profiles.model import ServerProfile, profile_jsonable, profile_to_toml
from tunedeck.profiles.presets import load_preset_file, preset_jsonable
from tunedeck.profiles.profileread import load_profile_file
from tunedeck.profiles.store import ProfileStore
from tunedeck.profiles.tomlread import ProfileError, parse_toml
from tunedeck.util.safety import terminal_json, visible


def _err(msg: str) -> int:
    _p(f"tunedeck: {msg}", file=sys.stderr)
    return 1


def _p(text: object = "", *, end: str = "\n", file: TextIO | None = None) -> None:
    """print() for text that may hold untrusted parts (names, models, keys, paths): every line
    is shown through :func:`visible`, so no control or bidi character reaches the terminal."""
    lines = str(text).split("\n")
    print("\n".join(visible(line) for line in lines), end=end, file=file or sys.stdout)


def _print_json(obj: object) -> None:
    _p(terminal_json(json.dumps(obj, indent=2, ensure_ascii=False)))


def load_named(store: ProfileStore, name: str) -> ServerProfile:
    """A profile by name, or by path when ``name`` is an existing ``.toml`` file."""
    p = Path(name)
    if name.endswith(".toml") and p.is_file():
        return load_profile_file(p, source="file")
    return store.get(name)


def _list(args: argparse.Namespace) -> int:
    store = ProfileStore()
    listing = store.listing()
    if args.json:
        _print_json(
            {
                "user_folder": str(store.user),
                "builtin_folder": str(store.builtin),
                "profiles": [profile_jsonable(p) for p in listing.profiles],
                "shadowed": [{"name": p.name, "path": p.path} for p in listing.shadowed],
                "errors": [e.as_dict() for e in listing.errors + tuple(store.preset_errors())],
            }
        )
        return 0
    rows = []
    for p in sorted(listing.profiles, key=lambda p: p.name):
        att = p.attention_backend or "auto"
        if p.prefill_backend or p.decode_backend:
            att += f" (prefill {p.prefill_backend or '-'}, decode {p.decode_backend or '-'})"
        rows.append((p.name, p.engine, p.source, str(p.tp), att, p.nccl_preset, p.model))
    for line in text_table(("NAME", "ENGINE", "SOURCE", "TP", "ATTENTION", "NCCL", "MODEL"), rows):
        _p(line)
    for p in listing.shadowed:
        _p(f"note: built-in {p.name!r} is shadowed by the user profile of the same name", file=sys.stderr)
    for e in listing.errors + tuple(store.preset_errors()):
        _p(f"tunedeck: broken file skipped: {e}", file=sys.stderr)
    return 0


def _show(args: argparse.Namespace) -> int:
    store = ProfileStore()
    try:
        p = load_named(store, args.name)
    except ProfileError as e:
        return _err(str(e))
    if args.json:
        _print_json(profile_jsonable(p))
        return 0
    _p(f"# {p.name} ({p.source}{', read-only' if p.read_only else ''}) {p.path}")
    _p(profile_to_toml(p), end="")
    return 0


def _check(args: argparse.Namespace) -> int:
    path = Path(args.file)
    store = ProfileStore()
    kind = "profile"
    text = ""
    try:
        if not path.is_file():
            raise ProfileError("no such file", path=path)
        text = path.read_text(encoding="utf-8", errors="replace")
        data = parse_toml(text, path)
        if "engine" not in data and ("nccl" in data or "attention" in data) and not ({"model", "tp"} & set(data)):
            kind = "presets"
            nccl, att = load_preset_file(path, source="file")
            summary = f"{len(nccl)} NCCL and {len(att)} attention presets"
            issues: list[Issue] = []
        else:
            prof = load_profile_file(path, source="file")
            nccl_p = resolve_nccl(prof, store)
            _cmd, issues = check_profile(prof, nccl=nccl_p, allow_dangerous=args.allow_dangerous_env)
            errors = [i for i in issues if i.severity == "error"]
            if errors:
                first = errors[0]
                raise ProfileError(first.message, path=path, line=line_of_key(prof, first.key), key=first.key)
            summary = f"{prof.engine} profile {prof.name!r}"
    except ProfileError as e:
        if not e.path:
            from tunedeck.profiles.tomlread import key_line

            line = key_line(text, tuple(e.key.split("."))) if e.key else None
            e = ProfileError(e.message, path=path, line=line, key=e.key)
        if args.json:
            _print_json({"ok": False, "file": str(path), "error": e.as_dict()})
        else:
            _p(f"tunedeck: {e}", file=sys.stderr)
        return 1
    if args.json:
        _print_json(
            {
                "ok": True,
                "file": str(path),
                "kind": kind,
                "warnings": [{"key": i.key, "message": i.message, "severity": i.severity} for i in issues],
            }
        )
    else:
        _p(f"{path}: ok ({summary})")
        for i in issues:
            _p(f"  {i}")
    return 0


def _command(args: argparse.Namespace) -> int:
    store = ProfileStore()
    try:
        p = load_named(store, args.name)
        if p.multi_node:
            return _deployment_command(args, store, p)
        cmd = build_command(p, demo=args.demo, store=store, allow_dangerous=args.allow_dangerous_env)
    except ProfileError as e:
        return _err(str(e))
    if args.json:
        out = cmd.jsonable()
        out["profile"] = p.name
        out["host"] = target_label(args.demo, args.host)
        _print_json(out)
        return 0
    _p(cmd.display)
    for w in cmd.warnings:
        _p(f"# {w}", file=sys.stderr)
    return 0


def _deployment_command(args: argparse.Namespace, store: ProfileStore, p: ServerProfile) -> int:
    """Every node's command of a multi-node profile, in launch order."""
    from tunedeck.profiles.deploy import RAY_WAIT, build_deployment
    from tunedeck.services.deploy import resolve_head_address

    plan = build_deployment(
        p,
        head_address=resolve_head_address(p),
        sim=args.sim,
        demo=args.demo,
        store=store,
        allow_dangerous=args.allow_dangerous_env,
    )
    if args.json:
        _print_json(plan.jsonable())
        return 0
    _p(
        f"# {p.name}: {plan.engine} {plan.mode} over {len(plan.nodes)} nodes, rendezvous {plan.rendezvous}, "
        f"{plan.gpus_needed} GPUs"
    )
    for s in plan.steps:
        _p(f"# {s.label}")
        if s.kind == RAY_WAIT:
            _p(f"#   until `{' '.join(s.check)}` shows {s.gpus} GPUs")
        elif s.command is not None:
            _p(s.command.display)
    for w in plan.warnings:
        _p(f"# {w}", file=sys.stderr)
    return 0


def _diff(args: argparse.Namespace) -> int:
    store = ProfileStore()
    try:
        a = build_command(load_named(store, args.running), demo=args.demo, store=store, allow_dangerous=True)
        b = build_command(load_named(store, args.new), demo=args.demo, store=store, allow_dangerous=True)
    except ProfileError as e:
        return _err(str(e))
    d = diff_commands(a, b)
    if args.json:
        _print_json(d.jsonable())
    else:
        for line in d.lines() or ["(no change)"]:
            _p(line)
    return 0


def _presets(args: argparse.Namespace) -> int:
    store = ProfileStore()
    nccl = store.nccl_presets()
    att = store.attention_presets()
    if args.json:
        _print_json({"nccl": [preset_jsonable(p) for p in nccl], "attention": [preset_jsonable(p) for p in att]})
        return 0
    _p("NCCL presets:")
    rows = [(p.name, " ".join(f"{k}={v}" for k, v in p.vars) or "(no variables)") for p in nccl]
    notes = [[f"warning: {p.warning}"] if p.warning else [] for p in nccl]
    for line in noted_table(("NAME", "VARIABLES"), rows, notes, under="VARIABLES", indent="  "):
        _p(line)
    _p("Attention presets:")
    table = []
    for ap in att:
        parts = [f"backend={ap.backend}" if ap.backend else "backend=auto"]
        if ap.prefill:
            parts.append(f"prefill={ap.prefill}")
        if ap.decode:
            parts.append(f"decode={ap.decode}")
        table.append((ap.engine, ap.name, " ".join(parts)))
    for line in text_table(("ENGINE", "NAME", "SETTINGS"), table, indent="  "):
        _p(line)
    return 0


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(subparsers, common, "profiles")
    action = json_actions(p, "profiles_command", parents=[common], required=True)

    def add(name: str, func: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        sp = action(name, help)
        sp.set_defaults(func=func)
        return sp

    add("list", _list, "list profiles (user folder first, then built-ins)")
    s = add("show", _show, "show one profile")
    add_profile_argument(s)
    c = add("check", _check, "validate a profile or presets file (names file, line, key)")
    c.add_argument("file", metavar="FILE")
    add_dangerous_env_option(c)
    c = add("command", _command, "print the exact launch command line")
    add_profile_argument(c)
    add_dangerous_env_option(c)
    d = add("diff", _diff, "flags and env that differ between two profiles' commands")
    d.add_argument("running", metavar="RUNNING")
    d.add_argument("new", metavar="NEW")
    add("presets", _presets, "list NCCL and attention-backend presets")
