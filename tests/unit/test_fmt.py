"""Numbers as text, one way: a value that was not reported reads N/A, never 0."""

import math

import pytest

from tui import fmt
from tui.model import NA


@pytest.mark.parametrize("missing", [NA, None, math.nan, math.inf, "x", True, object()])
def test_what_was_not_reported_reads_na_everywhere(missing):
    assert fmt.fmt(missing) == fmt.human_bytes(missing) == fmt.gib(missing) == fmt.uptime(missing) == "N/A"
    assert fmt.eta(missing) == "?"


def test_sizes():
    assert fmt.human_bytes(512) == "512 B"
    assert fmt.human_bytes(1536 * 2**20) == "1.5 GiB"
    assert fmt.gib(141 * 2**30, " GiB") == "141.0 GiB"


def test_durations():
    assert fmt.uptime(3 * 86400 + 4 * 3600 + 5 * 60 + 6) == "3d 4h 5m"
    assert fmt.uptime(4 * 3600 + 5 * 60) == "4h 5m"
    assert fmt.uptime(306) == "5m 6s"
    assert fmt.eta(3720) == "1h02m" and fmt.eta(184) == "3m04s" and fmt.eta(42) == "42s" and fmt.eta(-3) == "0s"


def test_text_table_aligns_columns_and_leaves_the_last_one_unpadded():
    from tui.fmt import text_table

    lines = text_table(
        ("NAME", "TP", "MODEL"), [("a", 8, "deepseek-ai/DeepSeek-V3"), ("longer-name", 16, "m")], right=(1,)
    )
    assert lines == [
        "NAME         TP  MODEL",
        "a             8  deepseek-ai/DeepSeek-V3",
        "longer-name  16  m",
    ]
    ruled = text_table(("A", "B"), [("x", "yy")], indent="  ", rule=True)
    assert ruled == ["  A  B", "  -  --", "  x  yy"]
    assert text_table(("ONLY",), []) == ["ONLY"]
