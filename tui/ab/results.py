"""Turn stored results into comparison sides: benchmark run folders and journal A/B entries.

A reference (``tunedeck compare REF [REF]``) is one of:

* an A/B id (or unique prefix) from the journal: with one REF, compares its
  A and B; ``ABID:A`` / ``ABID:B`` picks one side of it;
* a benchmark run id (or unique prefix) in ``<data_dir>/results/``, or a
  path to a run folder or to its ``summary.json``;
* a sweep id (``sweep-…``): every level of that ``tunedeck bench`` sweep.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping

from tunedeck.ab.journal import Journal
from tunedeck.ab.sides import Side, SideRun, side_from_dict, summaries_to_levels
from tunedeck.util.paths import data_dir

log = logging.getLogger(__name__)


class RefError(ValueError):
    """A reference that names nothing usable (the message says what and where)."""


def _text(v: Any) -> str:
    """A recorded name as text; anything else (a dict, a list) is unknown, never its repr."""
    return v if isinstance(v, str) else ""


def _argv(v: Any) -> tuple[str, ...]:
    """The recorded server argv; () (unknown) unless it is a list of strings."""
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        return tuple(v)
    return ()


def _env(v: Any) -> dict[str, str]:
    if isinstance(v, Mapping):
        return {str(k): str(x) for k, x in v.items() if isinstance(x, (str, int, float))}
    return {}


def results_root() -> Path:
    return data_dir() / "results"


def _read_json(p: Path) -> Any:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise RefError(f"{p}: unreadable ({e})") from None


def find_run_dir(ref: str) -> Path | None:
    p = Path(ref)
    if p.name == "summary.json" and p.is_file():
        return p.parent
    if p.is_dir() and ((p / "summary.json").exists() or (p / "meta.json").exists()):
        return p
    root = results_root()
    if "/" in ref or not root.is_dir():
        return None
    exact = root / ref
    if exact.is_dir():
        return exact
    matches = [d for d in root.iterdir() if d.is_dir() and d.name.startswith(ref)]
    if len(matches) > 1:
        raise RefError(f"{ref}: ambiguous run id prefix ({', '.join(sorted(m.name for m in matches)[:5])})")
    return matches[0] if matches else None


def sweep_run_dirs(sweep_id: str) -> list[Path]:
    """The run folders of one ``tunedeck bench`` sweep (they share ``meta.sweep_id``), by level."""
    root = results_root()
    if not sweep_id.startswith("sweep-") or not root.is_dir():
        return []
    found = []
    for d in root.iterdir():
        meta = _read_json(d / "meta.json") if d.is_dir() else None
        if isinstance(meta, Mapping) and meta.get("sweep_id") == sweep_id:
            found.append((meta.get("level") if isinstance(meta.get("level"), int) else 0, d))
    return [d for _, d in sorted(found)]


def _get(d: Mapping[str, Any] | None, *path: str) -> Any:
    cur: Any = d
    for k in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(k)
    return cur


def _engine_name(value: Any) -> str:
    """The engine's name: a launched run records it as text, a benchmark as what the server
    answered (``{"engine": "sglang", "version": …}``), never shown as a raw dict."""
    if isinstance(value, Mapping):
        value = value.get("engine")
    return str(value or "")


def side_from_run_dir(run_dir: Path, label: str) -> Side:
    meta = _read_json(run_dir / "meta.json") or {}
    summary = _read_json(run_dir / "summary.json")
    if summary is None:
        summary = _rebuild_summary(run_dir)
    if summary is None:
        raise RefError(f"{run_dir}: no summary.json (and no samples to rebuild one from)")
    levels = summaries_to_levels(summary, run_id=run_dir.name)
    if levels and levels[0].concurrency == 0:
        c = _get(meta, "params", "max_concurrency") or _get(meta, "parameters", "concurrency")
        if isinstance(c, list) and len(c) == 1:
            c = c[0]
        if isinstance(c, int):
            levels = [type(levels[0])(c, levels[0].summary, levels[0].run_id)]
    server: Mapping[str, Any] = srv if isinstance(srv := meta.get("server"), Mapping) else {}
    raw_params = meta.get("params") if isinstance(meta.get("params"), Mapping) else meta.get("parameters")
    params = dict(raw_params) if isinstance(raw_params, Mapping) else {}
    lvl_params = []
    for lv in levels:
        lvl_params.append(
            {
                "concurrency": lv.concurrency,
                "input_len": params.get("input_len", lv.summary.get("input_len")),
                "output_len": params.get("output_len", lv.summary.get("output_len")),
                "num_prompts": params.get("num_prompts", lv.summary.get("num_prompts")),
            }
        )
    return Side(
        label=label,
        profile=str(meta.get("profile") or run_dir.name),
        engine=_engine_name(server.get("engine") or meta.get("engine")),
        model=_text(meta.get("model") or params.get("model") or (levels[0].summary.get("model_id") if levels else "")),
        argv=_argv(server.get("argv") or meta.get("server_argv")),
        env=_env(server.get("env") or meta.get("server_env")),
        params={
            "endpoint": params.get("endpoint"),
            "ignore_eos": params.get("ignore_eos"),
            "temperature": params.get("temperature"),
            "levels": lvl_params,
        },
        runs=(
            SideRun(
                levels=tuple(levels),
                startup_s=meta.get("startup_s"),
                launch_run_id=server.get("launch_run_id"),
                server_log=server.get("server_log"),
            ),
        ),
    )


def _rebuild_summary(run_dir: Path) -> Any:
    if not (run_dir / "samples.jsonl").exists():
        return None
    from tunedeck.bench import store

    if run_dir.parent.resolve() != store.results_dir().resolve():
        return None
    try:
        return store.rebuild_summary(run_dir.name)
    except (store.StoreError, OSError, ValueError) as e:  # unreadable run: reported as a missing summary
        log.warning("%s: no summary could be rebuilt: %s", run_dir, e)
        return None


def resolve_sides(refs: list[str], journal: Journal | None = None) -> tuple[Side, Side, dict[str, Any]]:
    """Two comparison sides from one or two references (see module doc)."""
    journal = journal or Journal()
    if len(refs) == 1:
        ent = journal.find(refs[0], "ab")
        if ent is None:
            raise RefError(
                f"{refs[0]}: no A/B with this id in the journal ({journal.path}); "
                "give two run ids to compare benchmark runs"
            )
        a, b = ent.get("a") or {}, ent.get("b") or {}
        if not (a.get("runs") and b.get("runs")):
            raise RefError(
                f"{refs[0]}: this A/B has results for only one side ({ent.get('status')}: "
                f"{ent.get('error') or 'no error recorded'})"
            )
        return side_from_dict(a), side_from_dict(b), {"ab": ent.get("id")}
    if len(refs) != 2:
        raise RefError("give one A/B id, or two run ids")
    sides = []
    for label, ref in zip(("A", "B"), refs):
        sides.append(_one(ref, label, journal))
    return sides[0], sides[1], {}


def resolve_side(ref: str, label: str, journal: Journal | None = None) -> Side:
    """One side from one reference: a run id (or prefix, or folder), a sweep id, or ``ABID:A``/``ABID:B``."""
    return _one(ref, label, journal or Journal())


def _one(ref: str, label: str, journal: Journal) -> Side:
    if ":" in ref and not Path(ref).exists():
        ab_ref, which = ref.rsplit(":", 1)
        which = which.upper()
        if which not in ("A", "B"):
            raise RefError(f"{ref}: the part after ':' must be A or B")
        ent = journal.find(ab_ref, "ab")
        if ent is None:
            raise RefError(f"{ref}: no A/B {ab_ref!r} in the journal ({journal.path})")
        d = dict(ent.get(which.lower()) or {})
        if not d.get("runs"):
            raise RefError(f"{ref}: side {which} of {ent.get('id')} has no results")
        d["label"] = label
        return side_from_dict(d)
    run_dir = find_run_dir(ref)
    if run_dir is not None:
        return side_from_run_dir(run_dir, label)
    sweep = sweep_run_dirs(ref)
    if sweep:
        sides = [side_from_run_dir(d, label) for d in sweep]
        levels = tuple(lv for sd in sides for lv in sd.runs[0].levels)
        first = sides[0]
        merged_params = dict(first.params)
        merged_params["levels"] = [lp for sd in sides for lp in sd.params.get("levels", [])]
        return Side(
            first.label,
            first.profile,
            first.engine,
            first.model,
            first.argv,
            first.env,
            merged_params,
            (
                SideRun(
                    levels=levels,
                    startup_s=first.runs[0].startup_s,
                    launch_run_id=first.runs[0].launch_run_id,
                    server_log=first.runs[0].server_log,
                ),
            ),
        )
    ent = journal.find(ref, "ab")
    if ent is not None:
        raise RefError(f"{ref}: is an A/B; use '{ref}' alone, or '{ref}:A' / '{ref}:B'")
    raise RefError(f"{ref}: no benchmark run with this id under {results_root()} and no such A/B in the journal")


__all__ = ["RefError", "find_run_dir", "resolve_side", "resolve_sides", "results_root", "side_from_run_dir"]
