"""Tuning campaigns in process: candidates from --vary, the runner's rounds, ranking, Pareto
frontier, failures as findings, resume from a saved state (over tests/abfakes.FakeOps)."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import pytest

from tests.abfakes import FakeOps
from tests.conftest import REPO, tunedeck_cmd
from tunedeck.ab.ops import BenchResult, ProfileInfo
from tunedeck.ab.plan import Plan, PlanLevel
from tunedeck.ab.tune import TuneRunner, Workload
from tunedeck.ab.tuneresult import pareto
from tunedeck.profiles.profileread import load_profile_text
from tunedeck.profiles.vary import VaryError, expand, parse_vary, read_candidates_file
from tunedeck.services.tunerun import estimate, parse_budget

BASE = """schema_version = 1
engine = "sglang"
model = "m"
tp = 8
port = 30000

[flags]
enable-metrics = true
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*tunedeck_cmd(), *args], capture_output=True, text=True, timeout=60, env=dict(os.environ), cwd=REPO
    )


def base_profile():
    return load_profile_text(BASE, name="base")


# ---------------------------------------------------------------------- candidates


def test_vary_is_a_cartesian_product_with_the_base_first_and_readable_names():
    cands = expand(
        base_profile(),
        parse_vary(["flags.attention-backend=fa3,flashinfer,triton", "flags.max-running-requests=32,128"]),
    )
    assert len(cands) == 7 and cands[0].is_base and cands[0].name == "base"
    names = [c.name for c in cands[1:]]
    assert names[0] == "base+attention-backend=fa3,max-running-requests=32"
    assert len(set(names)) == 6
    c = cands[-1]
    # the flag the profile sets from its own field is changed at that field
    assert dict(c.changes) == {"attention.backend": "triton", "flags.max-running-requests": 128}
    assert c.profile.attention_backend == "triton" and ("max-running-requests", 128) in c.profile.flags


def test_a_change_to_the_base_value_is_the_base_and_a_set_of_only_the_base_is_refused():
    cands = expand(base_profile(), parse_vary(["tp=8,4"]))
    assert [c.name for c in cands] == ["base", "base+tp=4"]
    with pytest.raises(VaryError, match="candidate set is empty"):
        expand(base_profile(), parse_vary(["flags.enable-metrics=true"]))


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (
            ["flags.attention-backnd=triton"],
            "is not a flag in tunedeck's table of sglang.*did you mean --attention-backend",
        ),
        (["flags.attention-backend=nope"], "'nope' is not one of its choices"),
        (["flags.attention-backend"], "expected KEY=V1,V2"),
        (["tp=4,"], "an empty value"),
        (["tp=4", "tp=2"], "varied twice"),
        (["model=x"], "cannot vary"),
        (["tp=many"], "--vary tp=many: tp: expected"),
    ],
)
def test_bad_vary_items_say_what_and_where(items, message):
    with pytest.raises(VaryError, match=message):
        expand(base_profile(), parse_vary(items))


def test_candidates_file(tmp_path: Path):
    f = tmp_path / "c.toml"
    f.write_text(
        '[[candidate]]\nname = "fi"\nchanges = { "attention.backend" = "flashinfer", "env.NCCL_PROTO" = "LL" }\n'
    )
    cands = expand(base_profile(), listed=read_candidates_file(str(f)))
    assert [c.name for c in cands] == ["base", "fi"]
    assert dict(cands[1].profile.env) == {"NCCL_PROTO": "LL"}
    f.write_text("# nothing here\n")
    with pytest.raises(VaryError, match="no \\[\\[candidate\\]\\] table: the candidate set is empty"):
        read_candidates_file(str(f))


def test_budget_and_estimate(tmp_path: Path):
    assert parse_budget("2h") == 7200 and parse_budget("1h30m") == 5400 and parse_budget("45") == 45
    with pytest.raises(ValueError, match="--budget 'soon'"):
        parse_budget("soon")
    from tunedeck.ab.journal import Journal

    j = Journal(tmp_path / "j.jsonl")
    j.record_launch("r1", profile="base", host="h", ready=True, startup_s=100.0)
    est = estimate(["base", "base+tp=4"], "base", max_steps=8, sim=False, journal=j)
    assert est.recorded == 2 and est.startup_s == 100.0  # the base's start-up stands in for a variant's
    assert est.total_s == 2 * (100.0 + 8 * 60.0 + 15.0)
    assert "start-up from the journal for 2 of 2" in est.text


# ---------------------------------------------------------------------- the runner


class CapOps(FakeOps):
    """Each candidate meets tpot_p90 <= 20 ms up to its ``knee`` concurrency."""

    def __init__(self, knees, **kw):
        super().__init__(speed={n: 50.0 for n in knees}, **kw)
        self.knees = knees

    async def bench(self, info, handle, req):
        level = req.level
        self.log.append(f"bench {info.name} C={level.concurrency}")
        c, k = level.concurrency, self.knees[info.name]
        tpot = 10.0 * (1 + c / k)  # 20 ms exactly at the knee
        return BenchResult(
            f"b{len(self.log)}",
            {
                "max_concurrency": c,
                "completed": level.num_prompts,
                "failed": 0,
                "p90_tpot_ms": tpot,
                "output_throughput": c * 1000.0 / tpot,
                "per_user_output_throughput": 1000.0 / tpot,
            },
        )


def spec_for(names, *, slo=("tpot_p90:20",), repeats_max=2, skip=None):
    plan = Plan("tune", (PlanLevel(1, 10, 64, 16, 0),))
    cands = []
    for n in names:
        info = ProfileInfo(n, "sglang", "m", ("sglang", f"--p={n}"), {}, 30000)
        cands.append({"name": n, "changes": {}, "info": info.to_json(), "tp": 8, "skip": (skip or {}).get(n)})
    return {
        "campaign": "tune-test",
        "base": names[0],
        "candidates": cands,
        "slo": list(slo),
        "workload": Workload(plan).to_dict(),
        "repeats_max": repeats_max,
        "max_steps": 12,
    }


def launches(ops):
    return [line.split(" ", 1)[1] for line in ops.log if line.startswith("launch ")]


async def test_rounds_rank_repeat_the_leaders_and_drop_the_losers(tmp_path: Path):
    from tunedeck.ab.journal import Journal

    knees = {"base": 40, "slow": 10, "fast": 44, "mid": 20, "oom": 50}
    ops = CapOps(knees, fail={"oom": "CUDA out of memory"})
    spec = spec_for(["base", "slow", "fast", "mid", "oom", "huge"], skip={"huge": "needs 16 GPUs, the host has 8"})
    rep = await TuneRunner(ops, spec, journal=Journal(tmp_path / "j.jsonl")).run()
    assert rep["status"] == "completed"
    by = {c["name"]: c for c in rep["candidates"]}
    assert rep["winner"] == "fast" and rep["ranking"][:2] == ["fast", "base"]
    # within the noise band: both measured twice (interleaved), the losers once, then dropped
    assert launches(ops) == ["base", "slow", "fast", "mid", "oom", "fast", "base"]
    assert len(by["fast"]["measurements"]) == 2 and by["slow"]["state"] == "dropped"
    assert abs(by["fast"]["capacity"] - 44) <= 4.4 and abs(by["base"]["capacity"] - 40) <= 4
    # a failed start and a pre-flight refusal are findings, not crashes
    assert by["oom"]["state"] == "failed" and "CUDA out of memory" in by["oom"]["findings"][0]
    assert by["huge"]["state"] == "skipped" and "16 GPUs" in by["huge"]["findings"][0]
    assert by["fast"]["tok_s_per_gpu"] == pytest.approx(by["fast"]["throughput_at_capacity"] / 8, abs=0.2)
    assert by["fast"]["startup_s"] == 2.0 and by["fast"]["startup_phases"]
    assert "fast" in rep["pareto"] and by["fast"]["pareto"]
    assert [d["name"] for d in rep["winner_diff"]] == ["--p"]
    assert not ops.live  # every server it started was stopped


async def test_an_slo_nobody_meets_names_the_closest(tmp_path: Path):
    from tunedeck.ab.journal import Journal

    ops = CapOps({"a": 1, "b": 2})
    rep = await TuneRunner(ops, spec_for(["a", "b"], slo=("tpot_p90:5",)), journal=Journal(tmp_path / "j")).run()
    assert rep["winner"] is None
    assert rep["closest"]["name"] == "b" and rep["closest"]["concurrency"] == 1
    assert "tpot_p90" in rep["closest"]["reasons"][0]


async def test_resume_keeps_finished_candidates_and_redoes_the_interrupted_one(tmp_path: Path):
    from tunedeck.ab.journal import Journal

    knees = {"a": 8, "b": 16, "c": 32}
    saved = []
    first = CapOps(knees)
    runner = TuneRunner(
        first,
        spec_for(["a", "b", "c"], repeats_max=1),
        on_state=lambda s: saved.append(copy.deepcopy(s)),
        journal=Journal(tmp_path / "j"),
    )
    await runner.run()
    # the state as the host-side job wrote it while c was running (its server launched)
    st = next(
        s
        for s in saved
        if any(c["state"] == "running" and c["name"] == "c" and c["launches"] for c in s["candidates"])
        and s["live"]
        and s["live"]["run_id"]
    )
    second = CapOps(knees, running=[st["live"]["run_id"]])
    rep = await TuneRunner(
        second, spec_for(["a", "b", "c"], repeats_max=1), state=st, journal=Journal(tmp_path / "j")
    ).run()
    assert second.log[0] == f"stop-existing {st['live']['run_id']}"  # the server the killed run left
    assert launches(second) == ["c"]  # nothing finished is measured again
    by = {c["name"]: c for c in rep["candidates"]}
    assert rep["winner"] == "c" and rep["resumes"] == 1
    assert [bool(la.get("interrupted")) for la in by["c"]["launches"]] == [True, False]
    assert len(by["a"]["measurements"]) == len(by["b"]["measurements"]) == 1


def test_pareto():
    pts = {"a": (10.0, 100.0), "b": (20.0, 50.0), "c": (9.0, 90.0), "d": (20.0, 50.0)}
    assert sorted(pareto(pts)) == ["a", "b", "d"]


# ---------------------------------------------------------------------- the command line


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--vary", "flags.attention-backnd=triton"], "--attention-backnd is not a flag"),
        ([], "the candidate set is empty"),
        (["--vary", "tp=8"], "the candidate set is empty: every combination is the base itself"),
        (["--vary", "tp=4", "--slo", "ttft_p90:fast"], "SLO term 'ttft_p90:fast': 'fast' is not a number"),
        (["--vary", "tp=4", "--slo", "latency:5"], "unknown metric 'latency'"),
        (["--vary", "tp=4", "--budget", "1m"], r"--budget 1m \(1m00s\) cannot fit this campaign: estimated"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_starts(tmp_path: Path, monkeypatch, args, message):
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "base.toml").write_text(BASE)
    monkeypatch.setenv("TUNEDECK_PROFILES", str(user))
    slo = [] if "--slo" in args else ["--slo", "ttft_p90:500"]
    r = _cli("tune", "base", "--demo", *args, *slo)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunedeck tune: "), r.stderr
    assert __import__("re").search(message, lines[0]), lines[0]
    assert not (Path(os.environ["TUNEDECK_HOME"]) / "tune").exists()  # nothing was started


@pytest.mark.timeout(60)
async def test_the_journal_lists_a_campaign_with_its_winner():
    from tunedeck.ab.journal import Journal
    from tunedeck.services.tunerun import journal_record

    rep = await TuneRunner(CapOps({"a": 8, "b": 16}), spec_for(["a", "b"], repeats_max=1)).run()
    Journal().append(journal_record(rep, "job-1"))
    r = _cli("journal", "list", "--kind", "tune")
    assert r.returncode == 0, r.stderr
    assert "tune-test" in r.stdout and "a (2 candidates) slo=tpot_p90:20" in r.stdout and "winner b" in r.stdout


async def test_successive_halving_keeps_the_better_half_of_a_tie(tmp_path: Path):
    from tunedeck.ab.journal import Journal

    names = ["a", "b", "c", "d", "e"]
    ops = CapOps(dict.fromkeys(names, 40))
    rep = await TuneRunner(ops, spec_for(names, repeats_max=2), journal=Journal(tmp_path / "j")).run()
    by = {c["name"]: c for c in rep["candidates"]}
    again = [n for n in names if len(by[n]["measurements"]) == 2]
    assert len(again) == 3, launches(ops)  # within the noise band, all: the better half measured again
    for n in set(names) - set(again):
        assert by[n]["state"] == "dropped" and "lower half (successive halving)" in by[n]["findings"][-1]


# ---------------------------------------------------------------------- a partial result


async def _state_while(name: str, names: list[str], knees: dict[str, int], tmp_path: Path) -> tuple[dict, dict]:
    """(spec, the state a campaign over ``names`` saved while ``name``'s server was launched)."""
    from tunedeck.ab.journal import Journal

    spec = spec_for(names, repeats_max=1, skip={"huge": "needs 16 GPUs"})
    saved: list[dict] = []
    await TuneRunner(
        CapOps(knees), spec, on_state=lambda s: saved.append(copy.deepcopy(s)), journal=Journal(tmp_path / "j")
    ).run()
    st = next(
        s
        for s in saved
        if any(c["state"] == "running" and c["name"] == name for c in s["candidates"])
        and (s["live"] or {}).get("run_id")
    )
    return spec, st


async def test_a_partial_result_from_the_state_ranks_the_finished_and_names_the_rest(tmp_path: Path):
    from tunedeck.ab.tuneresult import partial_report
    from tunedeck.commands.tune import render
    from tunedeck.report.campaign import campaign_report
    from tunedeck.report.markdown import to_markdown

    names = ["a", "b", "c", "d", "huge"]
    spec, st = await _state_while("c", names, {"a": 8, "b": 16, "c": 32, "d": 64, "huge": 1}, tmp_path)
    rep = partial_report(spec, st, why="killed 4 times", left_running=["c (run run3): left by the campaign's process"])
    assert rep is not None and rep["status"] == "partial"
    by = {c["name"]: c for c in rep["candidates"]}
    assert [by[n]["state"] for n in names] == ["measured", "measured", "pending", "pending", "skipped"]
    assert rep["ranking"] == ["b", "a"] and rep["winner"] == "b" and rep["not_measured"] == ["c", "d"]
    assert by["c"]["findings"] == [
        "not measured: its measurement was cut short 1 time(s) by the end of the campaign's process"
    ]
    assert [la.get("interrupted") for la in by["c"]["launches"]] == [True]
    assert by["d"]["findings"] == ["not measured: the campaign's process ended before it was reached"]
    assert rep["error"] == "killed 4 times; 2 of 4 candidate(s) measured, read from the job folder; not measured: c, d"
    assert rep["left_running"] == ["c (run run3): left by the campaign's process"]
    assert by["b"]["capacity"] and by["b"]["pareto"] and rep["host"] == "?"
    # the text, the HTML/Markdown report and the journal say it is partial
    text = render(rep)
    assert "(partial)" in text.splitlines()[0] and "not measured: c, d" in text and "best of the measured: b" in text
    assert "winner:" not in text and "best of the measured: b" in text
    report = campaign_report(rep)
    assert report.headline.startswith("Partial: 2 of 4 candidates measured. Best measured: b")
    md = to_markdown(report)
    assert "Partial result" in md and "Not measured: c" in md and "b (best measured)" in md
    assert "The best measured against the base (a)" in md and "The winner" not in md


async def test_a_partial_result_needs_a_finished_candidate_and_a_repeat_not_made_is_said(tmp_path: Path):
    from tunedeck.ab.tuneresult import partial_report

    spec, st = await _state_while("a", ["a", "b"], {"a": 8, "b": 16}, tmp_path)
    assert partial_report(spec, st, why="killed") is None  # nothing finished: no result to report
    # round 2 of two leaders, killed while the first was measured again
    from tunedeck.ab.journal import Journal

    saved: list[dict] = []
    spec = spec_for(["a", "b"], repeats_max=2)
    await TuneRunner(
        CapOps({"a": 40, "b": 40}),
        spec,
        on_state=lambda s: saved.append(copy.deepcopy(s)),
        journal=Journal(tmp_path / "k"),
    ).run()
    st = next(s for s in saved if s["round"] == 1 and any(c["state"] == "running" for c in s["candidates"]))
    rep = partial_report(spec, st, why="killed", status="cancelled")
    assert rep is not None and rep["status"] == "cancelled" and rep["not_measured"] == []
    found = [f for c in rep["candidates"] for f in c["findings"]]
    assert found == ["measurement 2 not made: the campaign's process ended first"] * 2, found


# ---------------------------------------------------------------------- a multi-node base

MULTI = """schema_version = 1
engine = "sglang"
model = "m"
tp = 16
port = 30000
nodes = ["gpu-a", "gpu-b"]

[deploy]
head_address = "10.0.0.1"

[env]
HF_TOKEN = "hf_secret_value_1234"
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", [["--demo"], ["--host", "gpu-a"]])
def test_a_multi_node_base_names_its_nodes_no_host_or_demo(tmp_path: Path, monkeypatch, where):
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "mn.toml").write_text(MULTI)
    monkeypatch.setenv("TUNEDECK_PROFILES", str(user))
    r = _cli("tune", "mn", *where, "--vary", "flags.max-running-requests=32", "--slo", "ttft_p90:500")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (
        "tunedeck tune: BASE mn names its nodes (gpu-a, gpu-b); drop --host/--demo (--sim runs the simulator on them)"
    )
    assert not (Path(os.environ["TUNEDECK_HOME"]) / "tune").exists()


def test_a_multi_node_candidate_is_planned_as_a_deployment_and_read_back_from_the_spec(monkeypatch):
    """Each candidate of a multi-node base is a deployment on the base's nodes (one that cannot be
    built is skipped with the reason); the job reads each candidate's profile back from the spec
    as it was planned, and the spec it leaves at the end holds no profile (nor its secrets)."""
    from tunedeck.hostside.tunejob import redacted_spec
    from tunedeck.profiles.model import profile_to_dict
    from tunedeck.services.deploytune import plan_candidates, sides_of
    from tunedeck.services.tunerun import spec_entry

    base = load_profile_text(MULTI, name="mn")
    cands = expand(base, parse_vary(["flags.max-running-requests=32", "tp=16,24"]))
    planned = plan_candidates(cands, sim=True)
    why = {c.name: skip for c, _, skip in planned}
    assert why["mn+max-running-requests=32"] is None and why["mn"] is None
    assert "tp = 24 over 2 nodes is 12 GPUs per node" in str(why["mn+max-running-requests=32,tp=24"])
    entries = []
    for c, plan, skip in planned:
        e = spec_entry(c, None, skip)
        assert e["tp"] == (plan.gpus_needed if plan else 24)
        if skip is None:
            e["profile"] = profile_to_dict(c.profile)
        entries.append(e)
    spec = {"base": "mn", "sim": True, "candidates": entries}
    sides = sides_of(spec)
    assert list(sides) == ["mn", "mn+max-running-requests=32"]
    for c, plan, skip in planned:
        if skip is None:
            prof, again = sides[c.name]
            assert profile_to_dict(prof) == profile_to_dict(c.profile)
            assert again.steps == plan.steps and again.gpus_needed == 16
    assert "hf_secret_value_1234" in str(spec)
    left = redacted_spec(spec)
    assert "hf_secret_value_1234" not in str(left) and not any("profile" in c for c in left["candidates"])


# ---------------------------------------------------------------------- [deploy] keys and GPU counts

RAY = """schema_version = 1
engine = "vllm"
model = "m"
tp = 8
port = 30000
nodes = ["gpu-a", "gpu-b"]

[deploy]
head_address = "10.0.0.1"
"""


def ray_profile(extra: str = ""):
    return load_profile_text(RAY + extra, name="vr")


def test_deploy_sizes_vary_over_a_multi_node_base_and_a_shape_the_nodes_cannot_hold_is_skipped():
    """``deploy.pp`` over vLLM on Ray: pp = 2 is the default (the node count) and so the base; pp = 3
    asks for 24 GPUs of two 8-GPU nodes, which the planner refuses: that candidate is skipped with
    its reason, the others are planned with their own GPU count."""
    from tunedeck.services.deploytune import plan_candidates
    from tunedeck.services.tunerun import spec_entry

    cands = expand(ray_profile(), parse_vary(["deploy.pp=1,2,3"]))
    assert [(c.name, c.changes) for c in cands] == [
        ("vr", ()),
        ("vr+deploy.pp=1", (("deploy.pp", 1),)),
        ("vr+deploy.pp=3", (("deploy.pp", 3),)),
    ]
    why = {c.name: skip for c, _, skip in plan_candidates(cands, sim=True)}
    assert why["vr"] is None and why["vr+deploy.pp=1"] is None
    assert "deploy.pp" in str(why["vr+deploy.pp=3"]) and "tp × pp = 8 × 3 = 24 GPUs" in str(why["vr+deploy.pp=3"])
    assert [spec_entry(c, None, None)["tp"] for c in cands] == [16, 8, 24]


def test_deploy_mode_and_dp_vary_together_and_a_size_its_mode_does_not_use_is_no_change():
    """mode × dp: dp is used by data parallel only, so under Ray (the vLLM default: ``mode = ray`` is
    the base) both dp values are the base; a mode the engine does not have is the loader's error."""
    cands = expand(ray_profile(), parse_vary(["deploy.mode=ray,dp", "deploy.dp=2,4"]))
    assert [c.name for c in cands] == ["vr", "vr+deploy.mode=dp,deploy.dp=2", "vr+deploy.mode=dp,deploy.dp=4"]
    assert cands[2].profile.deploy.mode == "dp" and cands[2].profile.deploy.dp == 4
    with pytest.raises(VaryError, match=r"deploy\.mode: 'tp' is not a vllm mode"):
        expand(ray_profile(), parse_vary(["deploy.mode=tp"]))


@pytest.mark.parametrize(
    ("items", "base", "message"),
    [
        (["deploy.dp=2,4"], "ray", "--vary deploy.dp: no candidate's deployment mode uses it (only mode = 'dp' does"),
        (
            ["deploy.pp=2"],
            "sglang",
            "deploy.pp varies only over a multi-node base (nodes = [...]); base runs on one host",
        ),
        (["deploy.gpus_per_node=4"], "ray", "deploy.gpus_per_node cannot vary in a campaign (of [deploy], only"),
        (["deploy.head_address=x"], "ray", "deploy.head_address cannot vary"),
        (["nodes=a"], "ray", "nodes cannot vary in a campaign"),
        (["deploy.pp=0"], "ray", "deploy.pp"),
    ],
)
def test_deploy_keys_that_cannot_vary_name_the_key(items, base, message):
    prof = ray_profile() if base == "ray" else base_profile()
    with pytest.raises(VaryError) as e:
        expand(prof, parse_vary(items))
    assert message in str(e.value)


def test_a_listed_candidate_with_a_size_its_mode_does_not_use_is_refused(tmp_path: Path):
    f = tmp_path / "c.toml"
    f.write_text('[[candidate]]\nname = "dp4"\nchanges = { "deploy.dp" = 4 }\n')
    with pytest.raises(VaryError, match=r"candidate dp4: deploy\.dp is not used by the candidate's deployment mode"):
        expand(ray_profile(), listed=read_candidates_file(str(f)))
    f.write_text('[[candidate]]\nname = "dp4"\nchanges = { "deploy.mode" = "dp", "deploy.dp" = 4 }\n')
    [_, c] = expand(ray_profile(), listed=read_candidates_file(str(f)))
    assert c.name == "dp4" and dict(c.changes) == {"deploy.mode": "dp", "deploy.dp": 4}


@pytest.mark.parametrize(
    ("text", "gpus"),
    [
        (BASE, 8),  # one host: tp
        (MULTI, 16),  # SGLang over two nodes: tp spans them
        (RAY, 16),  # vLLM on Ray: tp × pp, pp the node count
        (RAY + "pp = 1\n", 8),
        (RAY.replace("tp = 8", "tp = 2") + 'mode = "dp"\n', 16),  # vLLM DP: dp (every GPU in ranks of tp) × tp
        (RAY.replace("tp = 8", "tp = 2") + 'mode = "dp"\ndp = 4\n', 8),
    ],
)
def test_the_gpus_a_profile_runs_on_are_the_deployments(text, gpus):
    """What tok/s per GPU divides by: the planner's count over a deployment's nodes, not ``tp``."""
    from tunedeck.profiles.deploy import build_deployment, profile_gpus

    prof = load_profile_text(text, name="p")
    assert profile_gpus(prof) == gpus
    if prof.multi_node:
        assert build_deployment(prof, sim=True).gpus_needed == gpus
