"""The report of a tuning campaign (``tune --json FILE``): the candidates side by side in the
order of their rank, the Pareto frontier, their capacity under the SLO and the steps that found
it; a partial campaign (its job ended without its report) says so and names what it did not
measure."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from tunedeck.ab.sides import summary_number
from tunedeck.bench.workloads import describe, workload_of
from tunedeck.report.build import cell_text, now_text, num_text
from tunedeck.report.markdown import fmt_num
from tunedeck.report.parts import (
    BarChart,
    Code,
    LineChart,
    Notes,
    Part,
    Point,
    Report,
    ScatterChart,
    Section,
    Series,
    Table,
)


def _cand_num(c: Mapping[str, Any], key: str) -> float | None:
    return summary_number(c, key)


def frontier_chart(cands: Sequence[Mapping[str, Any]], names: Sequence[str]) -> ScatterChart | None:
    """The Pareto frontier of tok/s per user against tok/s per GPU (the campaign's ``pareto``
    flags; computed with :func:`tunedeck.ab.tuneresult.pareto` for a result that has none); None when no
    candidate has both figures."""
    from tunedeck.ab.tuneresult import pareto

    figures: dict[str, tuple[float, float]] = {}
    for name, c in zip(names, cands):
        u, g = _cand_num(c, "tok_s_per_user"), _cand_num(c, "tok_s_per_gpu")
        if u is not None and g is not None:
            figures[name] = (u, g)
    if not figures:
        return None
    flagged = any("pareto" in c for c in cands)
    front = {n for n, c in zip(names, cands) if c.get("pareto") is True} if flagged else set(pareto(figures))
    return ScatterChart(
        "Pareto frontier: tok/s per user against tok/s per GPU",
        "tok/s per user",
        "tok/s per GPU",
        tuple(Point(n, u, g, n in front) for n, (u, g) in figures.items()),
    )


def _campaign_setup(campaign: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The SLO (a list of terms, or a mapping), the workload (a campaign's level template, or a
    mapping) and the budget, as table rows."""
    rows: list[tuple[str, str]] = []
    slo = campaign.get("slo")
    if isinstance(slo, Mapping):
        rows += [(f"SLO: {k}", cell_text(x)) for k, x in slo.items()]
    elif isinstance(slo, (list, tuple)):
        rows.append(("SLO", " ".join(str(t) for t in slo)))
    elif slo is not None:
        rows.append(("SLO", cell_text(slo)))
    wl = campaign.get("workload")
    plan = wl.get("plan") if isinstance(wl, Mapping) else None
    if isinstance(plan, Mapping):
        assert isinstance(wl, Mapping)
        lv = (plan.get("levels") or [{}])[0]
        w = plan.get("workload")
        rows.append(("Workload", describe(workload_of({"workload": w})) if isinstance(w, Mapping) else "random"))
        rows.append(
            (
                "Each level",
                f"{lv.get('input_len')} tokens in / {lv.get('output_len')} out, {wl.get('prompts_per_c')} x C "
                f"requests (at least {wl.get('min_prompts')}), {plan.get('endpoint')} endpoint",
            )
        )
    elif isinstance(wl, Mapping):
        rows += [(f"Workload: {k}", cell_text(x)) for k, x in wl.items()]
    elif wl is not None:
        rows.append(("Workload", cell_text(wl)))
    for what, key in (("Budget (s)", "budget_s"), ("Estimated (s)", "estimate_s"), ("Spent (s)", "spent_s")):
        if isinstance(campaign.get(key), (int, float)):
            rows.append((what, num_text(float(campaign[key]), ",.0f")))
    return rows


def _campaign_notes(
    campaign: Mapping[str, Any], names: Sequence[str], cands: Sequence[Mapping[str, Any]]
) -> list[Part]:
    """The winner's changes against the base, the findings and warnings, the closest miss."""
    parts: list[Part] = []
    diff = [str(d.get("text")) for d in campaign.get("winner_diff") or () if isinstance(d, Mapping)]
    if diff:
        what = "The best measured" if campaign.get("status") == "partial" else "The winner"
        parts.append(Code(tuple(diff), title=f"{what} against the base ({cell_text(campaign.get('base'))})"))
    found = [f"{n}: {f}" for n, c in zip(names, cands) for f in c.get("findings") or ()]
    found += [str(w) for w in campaign.get("warnings") or ()]
    if found:
        parts.append(Notes(tuple(found), tone="warn", title="Findings"))
    cl = campaign.get("closest")
    if isinstance(cl, Mapping):
        parts.append(
            Notes(
                (
                    f"Closest: {cl.get('name')} at C={cl.get('concurrency')} ({'; '.join(map(str, cl.get('reasons') or ()))})",
                ),
                tone="warn",
            )
        )
    return parts


def campaign_report(campaign: Mapping[str, Any]) -> Report:
    """A campaign's result (``tune --json FILE``: ``{"campaign", "slo", "workload", "candidates":
    [...], "winner"}``): the candidates side by side in the order of their rank, the Pareto
    frontier, their capacity under the SLO and the steps that found it."""
    cid = str(campaign.get("campaign") or "?")
    cands = [c for c in campaign.get("candidates") or () if isinstance(c, Mapping)]
    cands.sort(
        key=lambda c: (not isinstance(c.get("rank"), int), c.get("rank") if isinstance(c.get("rank"), int) else 0)
    )
    names = [str(c.get("name") or f"#{i + 1}") for i, c in enumerate(cands)]
    winner = campaign.get("winner")
    win = winner.get("name") if isinstance(winner, Mapping) else winner
    partial = campaign.get("status") == "partial"
    mark = " (best measured)" if partial else " (winner)"
    rows = []
    for name, c in zip(names, cands):
        band = _cand_num(c, "noise_band_pct")
        rows.append(
            (
                name + (mark if win is not None and name == str(win) else ""),
                cell_text(c.get("changes")),
                str(c.get("state") or "?"),
                num_text(_cand_num(c, "capacity"), ",.0f"),
                num_text(_cand_num(c, "single_user_tok_s")),
                num_text(_cand_num(c, "tok_s_per_gpu")),
                num_text(_cand_num(c, "startup_s")),
                "-" if band is None else f"\u00b1{band:.0f} %",
            )
        )
    table = Table(
        ("Candidate", "Changes", "State", "Capacity", "Single-user tok/s", "tok/s per GPU", "Startup (s)", "Noise"),
        tuple(rows),
        numeric=(3, 4, 5, 6, 7),
    )
    cats = tuple(names)
    charts: list[Part] = []
    front = frontier_chart(cands, names)
    if front is not None:
        charts.append(front)
    for key, title, unit in (
        ("capacity", "Capacity under the SLO (concurrency)", "concurrency"),
        ("single_user_tok_s", "Single-user output tok/s", "tok/s"),
        ("tok_s_per_gpu", "Output tok/s per GPU", "tok/s"),
    ):
        pts = tuple((float(i), v) for i, c in enumerate(cands) if (v := _cand_num(c, key)) is not None)
        if pts:
            charts.append(BarChart(title, unit, cats, (Series(title, pts),)))
    steps_parts: list[Part] = []
    cs = sorted(
        {int(c) for cand in cands for st in cand.get("steps") or () if isinstance(c := st.get("concurrency"), int)}
    )
    for key, title, unit in (
        ("output_throughput", "Output tok/s by concurrency", "output tok/s"),
        ("p99_ttft_ms", "TTFT p99 by concurrency", "ms"),
        ("median_tpot_ms", "TPOT p50 by concurrency", "ms"),
    ):
        series = []
        for j, (name, cand) in enumerate(zip(names, cands)):
            by_c = {
                st.get("concurrency"): st.get("summary") for st in cand.get("steps") or () if isinstance(st, Mapping)
            }
            pts = tuple(
                (float(i), v)
                for i, c in enumerate(cs)
                if isinstance(by_c.get(c), Mapping) and (v := summary_number(by_c[c], key)) is not None
            )
            if pts:
                series.append(Series(name, pts, color=j, dash=j))
        if series:
            steps_parts.append(LineChart(title, "concurrency", unit, tuple(series), tuple(f"C={c}" for c in cs)))
    for name, cand in zip(names, cands):
        st_rows = []
        for st in cand.get("steps") or ():
            if not isinstance(st, Mapping):
                continue
            s = st.get("summary") if isinstance(st.get("summary"), Mapping) else {}
            st_rows.append(
                (
                    cell_text(st.get("concurrency")),
                    "yes" if st.get("met") else "no",
                    num_text(summary_number(s, "output_throughput")),
                    num_text(summary_number(s, "p99_ttft_ms"), ",.0f"),
                    num_text(summary_number(s, "median_tpot_ms"), ",.1f"),
                    cell_text(st.get("reasons")) if st.get("reasons") else "-",
                )
            )
        if st_rows:
            steps_parts.append(
                Table(
                    ("C", "SLO met", "Output tok/s", "TTFT p99 ms", "TPOT p50 ms", "Reasons"),
                    tuple(st_rows),
                    numeric=(0, 2, 3, 4),
                    title=name,
                )
            )
    setup = _campaign_setup(campaign)
    lead: list[Part] = []
    if partial:
        todo = [str(n) for n in campaign.get("not_measured") or ()]
        lead.append(
            Notes(
                (
                    "The campaign ended without its report; this is what its job folder holds: "
                    f"{cell_text(campaign.get('error'))}",
                    *(f"Not measured: {n}" for n in todo),
                ),
                tone="warn",
                title="Partial result",
            )
        )
    sections = [
        Section("Candidates", (*lead, table, *charts, *_campaign_notes(campaign, names, cands))),
        Section("Steps", tuple(steps_parts) or (Notes(("No steps recorded.",)),)),
        Section("Setup", (Table(("", "Value"), tuple(setup)),) if setup else (Notes(("Not recorded.",)),)),
    ]
    if win is not None:
        wc = next((c for n, c in zip(names, cands) if n == str(win)), {})
        cap = _cand_num(wc, "capacity")
        headline = f"{'Best measured' if partial else 'Winner'}: {win}"
        headline += f", capacity {fmt_num(cap)} concurrent users under the SLO" if cap else ""
    elif partial:
        headline = "No measured candidate met the SLO."
    else:
        headline = "No winner: no candidate met the SLO." if cands else "No candidates."
    if partial:
        measured = sum(1 for c in cands if c.get("measurements"))
        tried = sum(1 for c in cands if c.get("state") != "skipped")
        headline = f"Partial: {measured} of {tried} candidates measured. {headline}"
    facts = [("Campaign", cid), ("Candidates", str(len(cands)))]
    facts += [(what, str(campaign[key])) for what, key in (("Status", "status"), ("Host", "host")) if campaign.get(key)]
    return Report("campaign", cid, f"Campaign {cid}", headline, tuple(sections), now_text(), tuple(facts))


__all__ = ["campaign_report", "frontier_chart"]
