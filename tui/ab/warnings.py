"""What makes a comparison unfair or suspect: different models, engines or parameters, a client
measured through an SSH tunnel, client-bound or busy levels, and validity findings that differ."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from tunedeck.ab.confdiff import parse_flags
from tunedeck.ab.sides import VIA_SSH, Side, summary_number

#: the workload a result without a ``workload`` key ran (every result before workloads existed)
DEFAULT_WORKLOAD = "random"


def side_workloads(side: Side) -> set[str]:
    """The workload names ``side``'s level summaries ran (``random`` where a summary names none)."""
    out = set()
    for run in side.runs:
        for lv in run.levels:
            wl = lv.summary.get("workload")
            name = wl.get("name") if isinstance(wl, Mapping) else None
            out.add(str(name) if name else DEFAULT_WORKLOAD)
    return out


def _is_spec_flag(name: str) -> bool:
    n = name.lstrip("-").replace("_", "-")
    return n.startswith("speculative") or n == "sc" or n.startswith("sc.")


def _is_prefix_flag(name: str) -> bool:
    n = name.lstrip("-").replace("_", "-")
    return "prefix-caching" in n or "radix-cache" in n


def _flags_about(argv: Sequence[str], pred: Callable[[str], bool]) -> dict[str, str]:
    _prefix, flags = parse_flags(list(argv or ()))
    return {k: v for k, v in flags.items() if pred(k)}


def workload_warnings(a: Side, b: Side) -> list[str]:
    """Verdicts that would not transfer to production: speculative or prefix-cache settings compared on
    random token ids (nothing to accept, nothing shared), and speculative acceptance under ignore_eos."""
    w: list[str] = []
    spec_a, spec_b = _flags_about(a.argv, _is_spec_flag), _flags_about(b.argv, _is_spec_flag)
    pre_a, pre_b = _flags_about(a.argv, _is_prefix_flag), _flags_about(b.argv, _is_prefix_flag)
    random = sorted(n for n in side_workloads(a) | side_workloads(b) if n == DEFAULT_WORKLOAD)
    known = bool(a.argv) and bool(b.argv)
    if random and known and spec_a != spec_b:
        w.append(
            "A and B differ in speculative decoding but were measured on random token ids: acceptance depends "
            "on what is generated, so this verdict does not transfer to real text (use a text workload)"
        )
    if random and known and pre_a != pre_b:
        w.append(
            "A and B differ in prefix caching but were measured on random token ids: random prompts share "
            "no prefix, so the cache cannot show its effect (use a shared-prefix or conversation workload)"
        )
    if (spec_a or spec_b) and (a.params.get("ignore_eos") or b.params.get("ignore_eos") or _any_ignore_eos(a, b)):
        w.append(
            "speculative decoding compared with ignore_eos: generation is forced past the end of the answer "
            "into text the model would not write, where drafts are accepted differently; published "
            "speculative comparisons end at EOS"
        )
    return w


def _any_ignore_eos(a: Side, b: Side) -> bool:
    for side in (a, b):
        for lv in _level_params(side).values():
            if lv.get("ignore_eos"):
                return True
    return False


def _level_params(side: Side) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for lv in side.params.get("levels", ()) or ():
        try:
            out[int(lv["concurrency"])] = dict(lv)
        except (KeyError, TypeError, ValueError):
            continue
    # fall back to what the summaries say
    for run in side.runs:
        for lv in run.levels:
            d = out.setdefault(lv.concurrency, {})
            sp = lv.summary.get("params") or lv.summary.get("parameters") or {}
            if isinstance(sp, Mapping):
                for k in ("input_len", "output_len", "ignore_eos", "num_prompts"):
                    if k not in d and k in sp:
                        d[k] = sp[k]
    return out


#: mean output tokens per request of A and B further apart than this (relative) compare different work
OUTPUT_LEN_TOLERANCE = 0.05


def _mean_output_tokens(side: Side) -> dict[int, float]:
    """Concurrency -> output tokens per completed request, over the side's repeats."""
    tokens: dict[int, float] = {}
    done: dict[int, float] = {}
    for run in side.runs:
        for lv in run.levels:
            t = summary_number(lv.summary, "total_output_tokens")
            n = summary_number(lv.summary, "completed")
            if t is not None and n:
                tokens[lv.concurrency] = tokens.get(lv.concurrency, 0.0) + t
                done[lv.concurrency] = done.get(lv.concurrency, 0.0) + n
    return {c: tokens[c] / done[c] for c in tokens if done.get(c)}


def output_length_differences(a: Side, b: Side) -> list[str]:
    """Levels where A and B generated answers of different mean length (answers that end at EOS,
    ignore_eos off): tok/s then compares different amounts of work. With the same model and
    greedy decoding the answers are the same (speculative decoding does not change them), so
    this is measured, not assumed from ignore_eos being off."""
    ma, mb = _mean_output_tokens(a), _mean_output_tokens(b)
    out = []
    for c in sorted(set(ma) & set(mb)):
        x, y = ma[c], mb[c]
        if max(x, y) > 0 and abs(x - y) / max(x, y) > OUTPUT_LEN_TOLERANCE:
            out.append(
                f"C={c}: A and B generated answers of different length (mean {x:.0f} vs {y:.0f} tokens per "
                "request): tok/s compares different work; compare with ignore_eos on, or per-request latency"
            )
    return out


def tunnel_levels(side: Side) -> list[int]:
    """Concurrencies of ``side`` measured through an SSH tunnel (not the server's truth)."""
    out = set()
    for run in side.runs:
        for lv in run.levels:
            client = lv.summary.get("client")
            if isinstance(client, Mapping) and client.get("where") == VIA_SSH:
                out.add(lv.concurrency)
    return sorted(out)


def _validity_by_level(side: Side) -> dict[int, set[str] | None]:
    """Concurrency -> the validity rules found over the side's repeats (None: not checked)."""
    out: dict[int, set[str] | None] = {}
    for run in side.runs:
        for lv in run.levels:
            found = lv.summary.get("validity")
            if not isinstance(found, list):
                out.setdefault(lv.concurrency, None)
                continue
            rules = {str(f.get("rule")) for f in found if isinstance(f, dict)}
            out[lv.concurrency] = (out.get(lv.concurrency) or set()) | rules
    return out


def _rules_text(rules: set[str]) -> str:
    return "valid" if not rules else "[" + ", ".join(sorted(rules)) + "]"


def _prompt_sets_by_level(side: Side) -> dict[int, set[str]]:
    """The prompt sets (their workload sha256) ``side`` sent at each concurrency, where its summaries say."""
    out: dict[int, set[str]] = {}
    for run in side.runs:
        for lv in run.levels:
            wl = lv.summary.get("workload")
            sha = wl.get("sha256") if isinstance(wl, Mapping) else None
            if isinstance(sha, str) and sha:
                out.setdefault(lv.concurrency, set()).add(sha)
    return out


def prompt_set_differences(a: Side, b: Side) -> list[str]:
    """A warning for each level where A and B were sent different prompts (a changed file, another
    seed, a text corpus from another Python, prompts fitted by other tokenizers): the difference
    measured is then not only the servers'."""
    pa, pb = _prompt_sets_by_level(a), _prompt_sets_by_level(b)
    out = []
    for c in sorted(set(pa) & set(pb)):
        if pa[c] != pb[c]:
            sa, sb = ",".join(sorted(s[:12] for s in pa[c])), ",".join(sorted(s[:12] for s in pb[c]))
            out.append(
                f"C={c}: A and B were sent different prompt sets (workload sha256 {sa} vs {sb}): the difference "
                "is the workloads' as well as the servers'"
            )
    return out


def validity_differences(a: Side, b: Side) -> list[str]:
    """``C=16: A valid, B [power_at_cap]`` for each level where A's and B's validity findings differ."""
    va, vb = _validity_by_level(a), _validity_by_level(b)
    out = []
    for c in sorted(set(va) & set(vb)):
        ra, rb = va[c], vb[c]
        if ra is not None and rb is not None and ra != rb:
            out.append(f"C={c}: A {_rules_text(ra)}, B {_rules_text(rb)}")
    return out


def comparison_warnings(a: Side, b: Side) -> list[str]:
    w: list[str] = []
    vla, vlb = _validity_by_level(a), _validity_by_level(b)
    for c in sorted(set(vla) & set(vlb)):
        ra, rb = vla[c], vlb[c]
        if ra is not None and rb is not None and ra != rb:
            w.append(
                f"C={c}: A and B differ in validity: A {_rules_text(ra)}, B {_rules_text(rb)} "
                "(see `tunedeck results show RUN`)"
            )
        elif ra and rb:
            w.append(f"C={c}: both A and B are invalid: {_rules_text(ra)}")
    for side in (a, b):
        cs = tunnel_levels(side)
        if cs:
            w.append(
                f"{side.label}: measured through an SSH tunnel at C={','.join(map(str, cs))}: the link's "
                "latency and buffering are in these numbers, not the server's truth"
            )
    w.extend(workload_warnings(a, b))
    w.extend(prompt_set_differences(a, b))
    if a.model and b.model and a.model != b.model:
        w.append(f"A and B serve different models: {a.model!r} vs {b.model!r}")
    if a.engine and b.engine and a.engine != b.engine:
        w.append(f"A and B use different engines: {a.engine} vs {b.engine}")
    for key, what in (
        ("ignore_eos", "ignore_eos"),
        ("endpoint", "endpoint"),
        ("temperature", "temperature"),
    ):
        va, vb = a.params.get(key), b.params.get(key)
        if va is not None and vb is not None and va != vb:
            w.append(f"A and B were benchmarked with different {what}: {va!r} vs {vb!r}")
    w.extend(output_length_differences(a, b))
    la, lb = _level_params(a), _level_params(b)
    for c in sorted(set(la) & set(lb)):
        for key, what in (("input_len", "prompt length"), ("output_len", "output length")):
            va, vb = la[c].get(key), lb[c].get(key)
            if va is not None and vb is not None and va != vb:
                w.append(f"C={c}: A and B differ in {what}: {va} vs {vb}")
        va, vb = la[c].get("ignore_eos"), lb[c].get("ignore_eos")
        if va is not None and vb is not None and va != vb and a.params.get("ignore_eos") is None:
            w.append(f"C={c}: A and B differ in ignore_eos: {va} vs {vb}")
    ca, cb = set(a.concurrencies()), set(b.concurrencies())
    if ca != cb and ca and cb:
        w.append(
            f"A and B were run at different concurrencies: {sorted(ca)} vs {sorted(cb)}; rows for the others show n/a"
        )
    for side in (a, b):
        for i, run in enumerate(side.runs):
            rep = f" (repeat {i + 1})" if len(side.runs) > 1 else ""
            for lv in run.levels:
                s = lv.summary
                failed = summary_number(s, "failed") or 0
                if failed:
                    done = summary_number(s, "completed") or 0
                    w.append(
                        f"{side.label}{rep}: {int(failed)} of {int(failed + done)} requests failed "
                        f"at C={lv.concurrency}"
                    )
                if s.get("client_bound"):
                    w.append(
                        f"{side.label}{rep}: the benchmark client was saturated at C={lv.concurrency}"
                        f"{_client_reason(s, 'client_bound_reason')}; throughput may be understated"
                    )
                if s.get("machine_busy"):
                    w.append(
                        f"{side.label}{rep}: the benchmark client's machine was busy at C={lv.concurrency}"
                        f"{_client_reason(s, 'machine_busy_reason')}; its timestamps may be late"
                    )
                if s.get("usage_missing") or s.get("usage_present") is False:
                    w.append(
                        f"{side.label}{rep}: the server sent no usage at C={lv.concurrency}; token counts are estimates"
                    )
    return w


def unreliable_levels(side: Side) -> dict[int, str]:
    """Concurrency -> why its numbers cannot carry a verdict in the headline: the client was the
    limit ("client bound") or its machine was busy ("machine busy"), in any repeat."""
    out: dict[int, str] = {}
    for run in side.runs:
        for lv in run.levels:
            s = lv.summary
            why = [w for w, k in (("client bound", "client_bound"), ("machine busy", "machine_busy")) if s.get(k)]
            if why:
                have = out.get(lv.concurrency, "")
                out[lv.concurrency] = ", ".join(dict.fromkeys([*filter(None, have.split(", ")), *why]))
    return out


def _client_reason(summary: Mapping[str, Any], key: str) -> str:
    """`` (why)`` from the summary's client-health record, or nothing when it gives no reason."""
    client = summary.get("client")
    why = client.get(key) if isinstance(client, Mapping) else None
    return f" ({why})" if why else ""
