"""Shared error reporting for commands that talk to a host."""

from __future__ import annotations

import json
import sys

from tunedeck.hostops.hosts import HostError
from tunedeck.util.safety import UnsafeInput


def report_error(cmd: str, target: str, err: BaseException, *, as_json: bool) -> int:
    """Print a one-line error on stderr (and a JSON error object with --json); return the exit code."""
    if isinstance(err, HostError):
        kind, message = err.kind, err.message
    elif isinstance(err, UnsafeInput):
        kind, message = "invalid-input", str(err)
    else:  # pragma: no cover - defensive
        kind, message = "error", str(err) or type(err).__name__
    print(f"tunedeck {cmd}: {target}: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps({"target": target, "error": {"kind": kind, "message": message}}))
    return 2
