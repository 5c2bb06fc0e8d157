"""SGLang's speculative acceptance per level, from the counters it adds to when a request finishes
(``sglang:spec_verify_calls_total``, ``generation_tokens_total``, ``num_requests_total``), not from
the ``sglang:spec_accept_length`` gauge (the last decode-log interval's)."""

from __future__ import annotations

import pytest

from tunedeck.bench.counters import format_server_counters, level_figures, parse_counters

LAB = 'model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"'


def page(gen: int, reqs: int, verify: int | None, *, width: int | None = 4, gauge: float = 3.9) -> str:
    """An SGLang /metrics page; the token and request counters split by ``is_streaming`` as SGLang's."""
    lines = [
        f'sglang:generation_tokens_total{{{LAB},is_streaming="true"}} {gen - 10}.0',
        f'sglang:generation_tokens_total{{{LAB},is_streaming="false"}} 10.0',
        f'sglang:num_requests_total{{{LAB},is_streaming="true"}} {reqs - 1}.0',
        f'sglang:num_requests_total{{{LAB},is_streaming="false"}} 1.0',
        f"sglang:prompt_tokens_total{{{LAB}}} 5000.0",
        f"sglang:cached_tokens_total{{{LAB}}} 0.0",
        f"sglang:spec_accept_length{{{LAB}}} {gauge}",
        f"sglang:spec_accept_rate{{{LAB}}} 0.97",
    ]
    if verify is not None:
        lines.append(f"sglang:spec_verify_calls_total{{{LAB}}} {verify}.0")
    if width is not None:
        lines.append(f"sglang:spec_num_draft_tokens{{{LAB}}} {width}.0")
    return "\n".join(lines) + "\n"


def test_each_level_gets_the_acceptance_of_its_own_requests():
    # lifetime: 1,000 tokens, 10 requests, 300 verify steps; level 1: 8 requests of 100 tokens
    # made in 8 prefills + 400 verify steps (392 drafts accepted); level 2: 8 more in 8 + 200
    # (592 accepted). The gauge says 3.9 throughout: it is neither level's.
    start, after1, after2 = (parse_counters(p) for p in (page(1000, 10, 300), page(1800, 18, 700), page(2600, 26, 900)))
    one = level_figures(start, after1)
    assert one["spec_decode_num_drafts"] == 400 and one["spec_decode_accepted_tokens"] == 392
    assert one["spec_decode_acceptance_length"] == pytest.approx(1 + 392 / 400)
    assert one["spec_decode_draft_tokens"] == 400 * 3  # speculative_num_draft_tokens 4: 3 drafts per step
    assert one["spec_decode_acceptance_rate"] == pytest.approx(392 / 1200 * 100)
    assert one["server_counters_note"] is None
    two = level_figures(after1, after2)
    assert two["spec_decode_num_drafts"] == 200 and two["spec_decode_accepted_tokens"] == 592
    assert two["spec_decode_acceptance_length"] == pytest.approx(1 + 592 / 200)
    assert two["spec_decode_acceptance_rate"] == pytest.approx(592 / 600 * 100)
    assert two["spec_decode_per_position_acceptance_rates"] is None  # SGLang has no per-position counter
    assert format_server_counters(two) == [
        "Server counters this level: acceptance length 3.96, rate 98.7 % (200 drafts, 592 of 600 draft tokens accepted)"
    ]


def test_the_verify_counter_appears_with_the_first_verify_step():
    # a fresh server exports the labelled counter only once a request has been verified
    f = level_figures(parse_counters(page(0, 0, None)), parse_counters(page(210, 2, 100)))
    assert f["spec_decode_num_drafts"] == 100 and f["spec_decode_acceptance_length"] == pytest.approx(2.08)


def test_without_the_draft_width_gauge_the_length_stands_alone():
    f = level_figures(parse_counters(page(1000, 10, 300, width=None)), parse_counters(page(1250, 12, 400, width=None)))
    assert f["spec_decode_acceptance_length"] == pytest.approx(1 + 148 / 100)
    assert f["spec_decode_acceptance_rate"] is None and f["spec_decode_draft_tokens"] is None
    assert format_server_counters(f)[0].endswith("acceptance length 2.48 (100 drafts, 148 draft tokens accepted)")


def test_counters_that_do_not_add_up_or_go_back_give_no_acceptance():
    odd = level_figures(parse_counters(page(1000, 10, 300)), parse_counters(page(1050, 20, 350)))
    assert odd["spec_decode_acceptance_length"] is None and odd["spec_decode_num_drafts"] is None
    assert "do not add up (50 tokens, 10 requests, 50 verify steps)" in odd["server_counters_note"]
    back = level_figures(parse_counters(page(1000, 10, 300)), parse_counters(page(1100, 11, 20)))
    assert back["spec_decode_acceptance_length"] is None
    assert "went back" in back["server_counters_note"]
    idle = level_figures(parse_counters(page(1000, 10, 300)), parse_counters(page(1000, 10, 300)))
    assert idle["spec_decode_acceptance_length"] is None and idle["server_counters_note"] is None
