"""Numbers as text, one way: a value that was not reported reads N/A, never 0."""

import math

import pytest

from tunedeck import fmt
from tunedeck.model import NA


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
    from tunedeck.fmt import text_table

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
    # no headers: a listing of names and values (tunedeck probe)
    assert text_table(None, [("os", "Ubuntu 24.04"), ("nvidia-smi", "not found")]) == [
        "os          Ubuntu 24.04",
        "nvidia-smi  not found",
    ]
    assert text_table(None, []) == []


def test_short_targets_are_the_shortest_names_that_tell_hosts_apart():
    from tunedeck.fmt import short_targets

    # namespaced hosts: the same user, their own addresses
    assert short_targets(["op@10.177.61.2:40123", "op@10.177.61.3:40124"]) == {
        "op@10.177.61.2:40123": "10.177.61.2",
        "op@10.177.61.3:40124": "10.177.61.3",
    }
    # only the ports differ: host:port; an alias stays an alias
    got = short_targets(["op@gpu:2222", "op@gpu:2223", "gpu-b", "local"])
    assert got == {"op@gpu:2222": "gpu:2222", "op@gpu:2223": "gpu:2223", "gpu-b": "gpu-b", "local": "local"}
    # only the users differ: user@host
    assert short_targets(["a@h", "b@h"]) == {"a@h": "a@h", "b@h": "b@h"}
    # IPv6 in brackets keeps its brackets with a port
    assert short_targets(["[::1]:2222", "c@[::1]:2223"]) == {"[::1]:2222": "[::1]:2222", "c@[::1]:2223": "[::1]:2223"}
    # one host: its name alone; none: nothing
    assert short_targets(["root@gpu-box:22"]) == {"root@gpu-box:22": "gpu-box"}
    assert short_targets([]) == {}
