"""The host-side launch script run on this machine as ``SHELL -s -- ARGS``, as
``Host.run_script`` sends it, and its one-line answer read back."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def start_script(
    shell: list[str], script: str, args: list[str], home: Path, *, path: str | None = None, cwd: Path | None = None
) -> subprocess.Popen[str]:
    """``script`` started under ``shell`` with ``TUNEDECK_HOME=home`` (and ``PATH=path`` if given)."""
    p = subprocess.Popen(
        [*shell, "-s", "--", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=dict(os.environ, TUNEDECK_HOME=str(home), PATH=path or os.environ["PATH"]),
    )
    assert p.stdin is not None
    p.stdin.write(script)
    p.stdin.close()
    return p


def script_result(p: subprocess.Popen[str], started: list[int], other: str) -> tuple[str, list[str]]:
    """The script's answer: ``('PID', [pid, starttime])``, ``(other, [words…])`` or ``('ERR', [message])``;
    a started pid is added to ``started`` (for the test's clean-up)."""
    assert p.stdout is not None and p.stderr is not None
    out, err = p.stdout.read(), p.stderr.read()  # the script's shell ends once the wrapper started
    p.wait(timeout=60)
    for line in out.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "PID":
            started.append(int(rest.split()[0]))
        if kind in ("PID", other, "ERR"):
            return kind, rest.split() if kind != "ERR" else [rest]
    raise AssertionError(f"no result from the launch script: {out!r} {err!r}")
