"""The value types of the benchmark options (``type=`` of argparse): each turns one option's text
into its value or refuses it with one line naming the text and what was expected."""

from __future__ import annotations

import argparse
import math
from typing import Callable, TypeVar

T = TypeVar("T")


class BadValue(argparse.ArgumentTypeError, ValueError):
    """One option's text refused (a ValueError too, for callers that are not argparse)."""


def _whole(text: str, least: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise BadValue(f"{text!r}: expected a whole number") from None
    if v < least:
        raise BadValue(f"{text!r}: must be >= {least}")
    return v


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise BadValue(f"{text!r}: expected a number") from None


def pos_int(text: str) -> int:
    return _whole(text, 1)


def nonneg_int(text: str) -> int:
    return _whole(text, 0)


def port(text: str) -> int:
    v = pos_int(text)
    if v > 65535:
        raise BadValue(f"{text!r}: a port must be 1..65535")
    return v


def pos_float(text: str) -> float:
    v = _number(text)
    if not v > 0 or math.isinf(v):
        raise BadValue(f"{text!r}: must be a finite number > 0")
    return v


def nonneg_float(text: str) -> float:
    v = _number(text)
    if not 0 <= v < math.inf:
        raise BadValue(f"{text!r}: must be a finite number >= 0")
    return v


def ratio(text: str) -> float:
    v = _number(text)
    if not 0 <= v < 1:
        raise BadValue(f"{text!r}: must be within 0 (fixed lengths) and 1 (excluded)")
    return v


def _values(text: str, conv: Callable[[str], T], expected: str) -> list[T]:
    """The comma-separated values of ``text`` (empty items skipped), each read by ``conv``."""
    try:
        return [conv(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadValue(f"{text!r}: expected {expected}") from None


def int_list(text: str) -> list[int]:
    vals = _values(text, int, "integers separated by commas, e.g. 1,8,32")
    if not vals or any(v < 1 for v in vals):
        raise BadValue(f"{text!r}: every value must be >= 1")
    return vals


def rate_list(text: str) -> list[float]:
    vals = _values(text, float, "numbers or 'inf', e.g. 2,4,inf")
    if not vals:
        raise BadValue("empty request rate")
    if any(not v > 0 for v in vals):
        raise BadValue(f"{text!r}: rates must be > 0")
    return vals


def percentiles(text: str) -> list[float]:
    vals = _values(text, float, "numbers separated by commas, e.g. 50,90,99")
    if not vals or any(not 0 <= v <= 100 for v in vals):
        raise BadValue(f"{text!r}: every percentile must be within 0..100")
    return vals
