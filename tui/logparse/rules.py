"""One startup-line rule: a cheap key, a regex, what the line means. The engines' tables
(:mod:`tunedeck.logparse.sglang`, :mod:`tunedeck.logparse.vllm`) are tuples of these; the parser tries
them in order and the first rule that takes a line ends the search."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from tunedeck.logparse.parser import LogParser
    from tunedeck.logparse.patterns import LogLine

#: what a rule does with a line: (parser, the regex match or None, the message, the cleaned line)
Apply = Callable[["LogParser", Optional["re.Match[str]"], str, "LogLine"], None]


def fact(
    name: str,
    conv: Callable[[str], object] = str,
    *,
    group: int | None = None,
    then: Callable[[LogParser], None] | None = None,
) -> Apply:
    """What most rules do: state fact ``name``, the match's ``group`` (None: the first group that
    matched) through ``conv``; then ``then`` (the phase the line marks)."""

    def apply(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
        assert m is not None
        raw = m.group(group) if group is not None else next(g for g in m.groups() if g is not None)
        p.fact(name, conv(raw))
        if then is not None:
            then(p)

    return apply


def facts_found(p: LogParser, msg: str, conv: Callable[[str], object], *fields: tuple[str, re.Pattern[str]]) -> None:
    """State each fact (name, regex) whose regex ``msg`` holds, its first group through ``conv``; a
    field the line lacks is not stated (the engines' versions add and drop fields)."""
    for name, rx in fields:
        m = rx.search(msg)
        if m:
            p.fact(name, conv(m.group(1)))


def phase(name: str) -> Apply:
    """A rule whose line marks the start of phase ``name``."""

    def apply(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
        p.phase(name)

    return apply


@dataclass(frozen=True)
class Rule:
    """``key`` is a substring every line of the rule holds (``start``: the message starts
    with it); ``rx`` the regex searched when the key is there (None: the key is enough).
    ``claim``: the line is the rule's once the key is there, even when ``rx`` does not match
    (no later rule looks at it)."""

    key: str
    rx: re.Pattern[str] | None
    apply: Apply
    start: bool = False
    claim: bool = False


class RuleTable:
    """Rules tried in order; one regex of all their keys finds the few rules a line can match
    (most lines match none, and a line is looked at by the rules of the keys it holds)."""

    __slots__ = ("_keys", "rules")

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.rules = rules
        keys = sorted({r.key for r in rules}, key=len, reverse=True)
        self._keys = re.compile("|".join(re.escape(k) for k in keys))

    def run(self, p: LogParser, msg: str, ln: LogLine) -> bool:
        """Apply the first rule that takes ``msg``; True when one did."""
        found = self._keys.findall(msg)
        if not found:
            return False
        for r in self.rules:
            if r.key not in found or (r.start and not msg.startswith(r.key)):
                continue
            if r.rx is None:
                r.apply(p, None, msg, ln)
                return True
            m = r.rx.search(msg)
            if m is not None:
                r.apply(p, m, msg, ln)
                return True
            if r.claim:
                return True
        return False
