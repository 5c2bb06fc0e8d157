"""One flag of a server profile as the engine takes it: checked against the schema's spec or
the release's flags and turned into its one token (:class:`FlagChecker`); what a check finds is
an :class:`Issue` naming the profile field."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tunedeck.engine_flags import FlagTable
from tunedeck.profiles.flagcheck import judge
from tunedeck.profiles.model import ServerProfile
from tunedeck.profiles.schema import FLAGS, FlagSpec
from tunedeck.profiles.tomlread import CONTROL_RE

#: a number as a flag value (``-`` allowed: a negative value is not an option)
NUM_RE = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")


@dataclass(frozen=True, slots=True)
class Issue:
    """A validation message for one field of a profile."""

    severity: str  # "error" | "warning" | "info"
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.key}: {self.message}" if self.key else f"{self.severity}: {self.message}"


class FlagChecker:
    """Checks a profile's flags one at a time and turns each into its single token (``--name``,
    ``--name=value``), as the engine takes it: the schema's spec (:mod:`tunedeck.profiles.schema`), else
    the release's flag table judged by argparse's rules; every problem is an :class:`Issue` in
    :attr:`issues`, a flag given twice included (:attr:`seen`: flag -> where it was set)."""

    def __init__(self, profile: ServerProfile, table: FlagTable) -> None:
        self.p = profile
        self.issues: list[Issue] = []
        self.schema = FLAGS[profile.engine]
        #: the release's flags: names, prefixes and choices of what the schema does not list
        self.table = table
        self.seen: dict[str, str] = {}  # flag -> where it was set

    def error(self, key: str, message: str) -> None:
        self.issues.append(Issue("error", key, message))

    def warn(self, key: str, message: str, severity: str = "warning") -> None:
        self.issues.append(Issue(severity, key, message))

    def text(self, value: str, key: str, *, dash_ok: bool = False) -> bool:
        m = CONTROL_RE.search(value)
        if m:
            self.error(key, f"contains a control character {m.group()!r}")
            return False
        if not dash_ok and value.startswith("-"):
            self.error(key, f"value {value!r} starts with '-' (it would read as an option)")
            return False
        return True

    def flag(self, name: str, value: object, key: str, *, managed_ok: bool = False) -> str | None:
        """Check one flag and return its single token, or None (error recorded / false bool)."""
        spec = self.schema.get(name)
        if spec is None:
            spec = self.release_spec(name, value, key)
            if spec is None:
                return None
        if spec.managed and not managed_ok:
            self.error(key, f"--{name} is set by the profile's `{spec.managed}` field, not here")
            return None
        if name in self.seen:
            self.error(key, f"--{name} is given twice (also in {self.seen[name]})")
            return None
        self.seen[name] = key
        if spec.security and value not in (False, None):
            self.warn(key, f"--{name}: {spec.note or 'security-relevant'}")
        tok = self._value_token(spec, value, key)
        return tok

    def known_spec(self, name: str) -> FlagSpec | None:
        """The schema's spec, else one from the release's flag (exactly or by a unique prefix)."""
        spec = self.schema.get(name)
        if spec is None:
            v = judge(self.table, f"--{name}")
            if v.kind in ("ok", "prefix"):
                spec = FlagSpec(name, "str" if v.takes_value else "bool", v.choices)
        return spec

    def release_spec(self, name: str, value: object, key: str) -> FlagSpec | None:
        """A flag the schema does not list, judged against the release; None (recorded) if refused."""
        given = None if value is None or isinstance(value, bool) else str(value)
        v = judge(self.table, f"--{name}", given)
        if v.kind == "bad-choice":
            self.error(key, v.message)
            return None
        if v.kind in ("ok", "prefix"):
            if v.kind == "prefix":
                self.warn(key, v.message, "info")
            return FlagSpec(name, "str" if v.takes_value else "bool", v.choices)
        if not self.p.allow_unlisted_flags:
            self.error(key, f"{v.message} (allow_unlisted_flags = true passes it unchecked)")
            return None
        self.warn(key, f"{v.message}; passed unchecked (allow_unlisted_flags)")
        return FlagSpec(name, "bool" if value is True else "str")

    def _value_token(self, spec: FlagSpec, value: object, key: str) -> str | None:
        name = spec.name
        if spec.type == "bool":
            if value is True or value is None:
                return f"--{name}"
            if value is False:
                return None
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return f"--{name}" if value.lower() == "true" else None
            self.error(key, f"--{name} is a switch: use true or false")
            return None
        if value is None or value is True or value is False:
            self.error(key, f"--{name} needs a value ({spec.type})")
            return None
        if spec.type == "int":
            if isinstance(value, str):
                try:
                    value = int(value, 10)
                except ValueError:
                    self.error(key, f"--{name} needs an integer, got {value!r}")
                    return None
            if isinstance(value, float) or not isinstance(value, int):
                self.error(key, f"--{name} needs an integer, got {value!r}")
                return None
            return f"--{name}={value}"
        if spec.type == "float":
            if isinstance(value, str):
                if not NUM_RE.match(value):
                    self.error(key, f"--{name} needs a number, got {value!r}")
                    return None
                value = float(value)
            if not isinstance(value, (int, float)) or value != value or value in (float("inf"), float("-inf")):
                self.error(key, f"--{name} needs a finite number, got {value!r}")
                return None
            return f"--{name}={value!r}" if isinstance(value, float) else f"--{name}={value}"
        sval = value if isinstance(value, str) else (json.dumps(value) if spec.type == "json" else str(value))
        if isinstance(value, str) and not value:
            self.error(key, f"--{name} needs a non-empty value")
            return None
        if not self.text(sval, key):
            return None
        if spec.type == "json":
            try:
                json.loads(sval)
            except ValueError as e:
                self.error(key, f"--{name} needs JSON: {e}")
                return None
        if spec.choices and sval not in spec.choices:
            self.error(key, f"--{name}: {sval!r} is not one of {', '.join(spec.choices)}")
            return None
        return f"--{name}={sval}"


__all__ = ["NUM_RE", "FlagChecker", "Issue"]
