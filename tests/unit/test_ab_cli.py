"""CLI: compare (journal A/Bs and stored bench runs), journal list/export, plans."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

import pytest

from tests.abfakes import FakeOps
from tests.conftest import tunedeck_cmd
from tunedeck.ab.plans import load_plan
from tunedeck.ab.runner import ABRunner
from tunedeck.util.files import atomic_write_json
from tunedeck.util.paths import data_dir

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(60)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*tunedeck_cmd(), *args], capture_output=True, text=True, cwd=REPO, timeout=60)


def write_run(
    run_id: str,
    c: int,
    tput: float,
    tpot: float,
    *,
    profile: str,
    argv,
    env,
    in_len=128,
    ignore_eos=True,
    sweep_id=None,
    level=0,
) -> None:
    d = data_dir() / "results" / run_id
    params = {
        "max_concurrency": c,
        "input_len": in_len,
        "output_len": 64,
        "ignore_eos": ignore_eos,
        "endpoint": "completions",
        "temperature": 0.0,
        "num_prompts": 10,
    }
    atomic_write_json(
        d / "meta.json",
        {
            "run_id": run_id,
            "model": "m",
            "profile": profile,
            "params": params,
            "server": {"argv": argv, "env": env, "engine": "sglang"},
            "sweep_id": sweep_id,
            "level": level,
        },
    )
    atomic_write_json(
        d / "summary.json",
        {
            "run_id": run_id,
            "max_concurrency": c,
            "completed": 10,
            "failed": 0,
            "output_throughput": tput,
            "median_tpot_ms": tpot,
            "median_ttft_ms": 40.0,
            "p99_ttft_ms": 80.0,
            "p99_itl_ms": tpot * 2,
            "params": params,
        },
    )


async def test_compare_journal_ab_and_sides():
    rep = await ABRunner(FakeOps(), "base", "tuned", load_plan("quick")).run()
    r = cli("compare", rep.id)
    assert r.returncode == 0, r.stderr
    assert "B (tuned) is faster than A (base)" in r.stdout
    assert "Peak output tok/s (C=16)" in r.stdout and "B +18%" in r.stdout
    r = cli("compare", rep.id[:12] + ":B", rep.id + ":A", "--json")
    assert r.returncode == 0, r.stderr
    js = json.loads(r.stdout)
    assert js["winner"] == "A" and js["a_profile"] == "tuned"


def test_compare_two_stored_runs_with_exports(tmp_path: Path):
    write_run(
        "20261130-100000-aaaaaa",
        16,
        1000.0,
        10.0,
        profile="sglang-base",
        argv=["sglang", "serve", "--attention-backend=triton"],
        env={},
    )
    write_run(
        "20261130-100100-bbbbbb",
        16,
        1200.0,
        8.0,
        profile="sglang-tuned",
        argv=["sglang", "serve", "--attention-backend=flashinfer"],
        env={"NCCL_PROTO": "LL"},
        in_len=256,
    )
    md = tmp_path / "cmp.md"
    r = cli("compare", "20261130-100000", "20261130-100100-bbbbbb", "--markdown", str(md))
    assert r.returncode == 0, r.stderr
    assert "~ --attention-backend: triton \u2192 flashinfer" in r.stdout
    assert "+ NCCL_PROTO=LL" in r.stdout
    assert "warning: C=16: A and B differ in prompt length: 128 vs 256" in r.stdout
    assert "| Output tok/s (C=16) | 1,000.0 | 1,200.0 | +20% | B +20% |" in md.read_text()
    r = cli("compare", "20261130-100000", "20261130-100100", "--csv", "-")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert rows[0]["key"] == "single_output_tok_s" and rows[0]["outcome"] == "better"


def test_compare_errors_are_one_line():
    r = cli("compare", "nope", "nada")
    assert r.returncode == 2 and "nope: no benchmark run" in r.stderr and "Traceback" not in r.stderr
    r = cli("compare", "nope")
    assert r.returncode == 2 and "no A/B with this id" in r.stderr
    r = cli("compare", "a", "b", "c")
    assert r.returncode == 2


async def test_journal_list_and_export(tmp_path: Path):
    rep = await ABRunner(FakeOps(fail={"tuned": "CUDA out of memory"}), "base", "tuned", load_plan("quick")).run()
    r = cli("journal")
    assert r.returncode == 0, r.stderr
    assert rep.id in r.stdout and "failed" in r.stdout and "CUDA out of memory" in r.stdout
    out = tmp_path / "j.csv"
    r = cli("journal", "export", "--format", "csv", "-o", str(out))
    assert r.returncode == 0, r.stderr
    kinds = [row["kind"] for row in csv.DictReader(out.open())]
    assert kinds.count("launch") == 2 and kinds.count("bench") == 2 and kinds.count("ab") == 1
    r = cli("journal", "export", "--format", "md")
    assert "# tunedeck tuning journal" in r.stdout and "Stopped: B (tuned) failed to start" in r.stdout
    r = cli("journal", "list", "--kind", "ab", "--json")
    assert json.loads(r.stdout)[0]["status"] == "failed"


def test_plans_command():
    r = cli("plans", "list")
    assert r.returncode == 0 and "quick" in r.stdout and "sweep" in r.stdout
    r = cli("plans", "show", "default", "--json")
    assert json.loads(r.stdout)["levels"][1]["concurrency"] == 128


def test_compare_two_sweeps():
    for i, c in enumerate((1, 8, 32)):
        for n, (side, tok_per_user, tpot) in enumerate((("a", 100.0, 10.0), ("b", 110.0, 9.0))):
            write_run(
                f"20261130-100{n}{i}0-{side * 5}{i}",
                c,
                tok_per_user * c,
                tpot,
                profile=side,
                argv=["s"],
                env={},
                sweep_id=f"sweep-{side.upper()}",
                level=i,
            )
    r = cli("compare", "sweep-A", "sweep-B", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["key"]: row for row in json.loads(r.stdout)["rows"]}
    assert rows["output_tok_s_c8"]["verdict"] == "B +10%"
    assert rows["peak_output_tok_s"]["concurrency"] == 32


def test_event_lines_from_the_host_reach_the_terminal_without_escape_sequences(capsys):
    from tunedeck.ab.events import ABEvent
    from tunedeck.commands.ab import _progress_printer

    _progress_printer(quiet=False)(
        ABEvent("failed", "b: engine said \x1b]0;pwned\x07\x1b[2J boom", "b", step=2, steps=5)
    )
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert err.startswith("[2/5] [b] b: engine said ") and "boom" in err
