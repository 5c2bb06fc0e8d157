"""The one retry policy: doubling, capped, jitter within its bounds, reset after a success."""

import pytest

from tunedeck.util import retry


def test_delays_double_from_base_up_to_the_cap():
    assert [retry.delay(a, base=0.5, cap=4, jitter="none") for a in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]


@pytest.mark.parametrize("jitter,lo", [("equal", 0.5), ("full", 0.0)])
def test_jitter_stays_within_its_share_of_the_delay(jitter, lo):
    for a in range(1, 10):
        d = min(8.0, 2 ** (a - 1))
        for _ in range(50):
            assert lo * d <= retry.delay(a, base=1, cap=8, jitter=jitter) <= d


def test_a_backoff_resets_after_a_success():
    b = retry.Backoff(1.0, 30.0)
    assert [b.next() for _ in range(4)] == [1, 2, 4, 8]
    b.reset()
    assert b.next() == 1


def test_an_unknown_jitter_is_refused_by_name():
    with pytest.raises(ValueError, match="jitter 'half'"):
        retry.delay(1, jitter="half")
