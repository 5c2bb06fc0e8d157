"""The one way tests run ``tunedeck`` as a subprocess: argv builders for the commands many tests
repeat (a benchmark's load, a launch of the fake server, a launch on the demo host) and the run."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tests.conftest import REPO, tunedeck_cmd
from tests.waits import poll, scaled

#: a stand-in engine server (tests/fakeserver.py): the progress lines of a real one, no GPU
FAKE = str(REPO / "tests" / "fakeserver.py")


def run_cli(
    *args: str,
    timeout: float = 180,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    cwd: Path = REPO,
) -> subprocess.CompletedProcess[str]:
    """``tunedeck ARGS`` run to its end in ``cwd`` (the repository root); ``env``: its whole environment
    (default: this process's), ``stdin``: text on its standard input (default: none, not a terminal)."""
    return subprocess.run(
        [*tunedeck_cmd(), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else dict(env),
        input=stdin,
    )


def start_cli(*args: str, env: Mapping[str, str] | None = None, stdin: int | None = None) -> subprocess.Popen[str]:
    """``tunedeck ARGS`` started from the repository root, its output piped as text; ``env``: its
    whole environment (default: this process's), ``stdin``: e.g. ``subprocess.DEVNULL``."""
    return subprocess.Popen(
        [*tunedeck_cmd(), *args],
        cwd=REPO,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(env),
    )


@contextlib.contextmanager
def running(*args: str, **kw: Any) -> Iterator[subprocess.Popen[str]]:
    """``start_cli(*args, **kw)`` for the block: at its end killed if it still runs, its pipes closed."""
    proc = start_cli(*args, **kw)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def json_lines(proc: subprocess.Popen[str]) -> Iterator[dict[str, Any]]:
    """The JSON lines ``proc`` prints on stdout (e.g. ``bench --progress``), parsed, as they come;
    AssertionError with its stderr if it ends while more are awaited."""
    assert proc.stdout is not None and proc.stderr is not None
    while True:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        yield json.loads(line)


def read_until(lines: Iterable[str], pred: Callable[[str], object], seen: list[str], timeout: float) -> str | None:
    """Read ``lines`` (a process's output) into ``seen`` up to the first for which ``pred`` holds,
    returned; None when they end first. AssertionError with all seen once ``timeout`` s have passed."""
    deadline = time.monotonic() + timeout
    for line in lines:
        seen.append(line)
        if pred(line):
            return line
        assert time.monotonic() < deadline, "".join(seen)
    return None


def cli_json(*args: str, **kw: Any) -> Any:
    """``run_cli(*args)`` that must succeed; its standard output read as JSON."""
    r = run_cli(*args, **kw)
    assert r.returncode == 0, f"tunedeck {' '.join(args)}: exit {r.returncode}\n{r.stderr[-3000:]}"
    return json.loads(r.stdout)


def bench_load(
    conc: int | str, n: int, out: int, *, input_len: int = 8, warmup: int | None = 0, json_out: bool = True
) -> list[str]:
    """``tunedeck bench``'s load options: ``n`` prompts of ``input_len`` tokens at ``conc``
    concurrency, ``out`` tokens each; ``warmup`` None leaves the default; the summary as JSON on stdout."""
    opts = [
        "--concurrency",
        str(conc),
        "--num-prompts",
        str(n),
        "--input-len",
        str(input_len),
        "--output-len",
        str(out),
    ]
    if warmup is not None:
        opts += ["--warmup", str(warmup)]
    return [*opts, "--json", "-"] if json_out else opts


def launch_fake(port: int, load_s: float | str, *extra: str, wait: bool = True, json_out: bool = True) -> list[str]:
    """``tunedeck launch`` of the fake SGLang server on ``port``, ready after ``load_s`` seconds;
    with ``--wait`` and the outcome as JSON unless told not to."""
    return [
        "launch",
        *(["--wait"] if wait else []),
        *(["--json"] if json_out else []),
        "--cmd",
        sys.executable,
        FAKE,
        "--engine",
        "sglang",
        "--port",
        str(port),
        "--load-seconds",
        str(load_s),
        *extra,
    ]


def launch_demo(port: int, *serve: str, wait: bool = True) -> list[str]:
    """``tunedeck launch --demo`` of a simulated ``sglang serve`` of Qwen3-8B on ``port``, waiting up to
    60 s for it unless told not to; ``serve``: the serve options after the model (default: the port)."""
    return [
        "launch",
        "--demo",
        "--engine",
        "sglang",
        "--port",
        str(port),
        *(["--wait", "--timeout", "60"] if wait else []),
        "--cmd",
        "sglang",
        "serve",
        "--model-path",
        "/models/Qwen3-8B",
        *(serve or ("--port", str(port))),
    ]


def tune_small(out: object) -> list[str]:
    """A small ``tunedeck tune`` campaign's options: SLOs TTFT p90 200 ms and TPOT p90 30 ms, prompts
    of 64 tokens and answers of 16, 2 prompts per concurrency (6 at least), from C=16 in at most 6
    steps, one repeat, confirmed; its JSON report written to ``out``."""
    return [
        *("--slo", "ttft_p90:200", "tpot_p90:30", "--input-len", "64", "--output-len", "16"),
        *("--prompts-per-c", "2", "--min-prompts", "6", "--start", "16", "--max-steps", "6", "--repeats-max", "1"),
        *("--yes", "--json", str(out)),
    ]


class Stderr:
    """A process's stderr lines, each with when it arrived (``time.monotonic()``), read by a thread
    of its own while the test reads stdout (:meth:`finish`)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        self._proc = proc
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def first(self, text: str, after: float = 0.0) -> tuple[float, str] | None:
        return next(((t, x) for t, x in list(self.lines) if t >= after and text in x), None)

    def text(self) -> str:
        return "\n".join(x for _, x in list(self.lines))

    def wait_for(self, *texts: str, timeout: float, after: float = 0.0) -> tuple[float, str]:
        """The first line since ``after`` that holds one of ``texts``; AssertionError (with the last
        lines read) after the scaled ``timeout``, or at once if the process ended without it."""

        def found() -> tuple[float, str] | None:
            return next((hit for t in texts if (hit := self.first(t, after))), None)

        def seen() -> tuple[float, str] | bool | None:
            if self._proc.poll() is None:
                return found()
            self._t.join(10)  # it ended: its last lines may still be in the pipe
            return found() or True

        hit = poll(seen, timeout)
        if not isinstance(hit, tuple):
            raise AssertionError(f"no {' or '.join(map(repr, texts))} on stderr:\n{self.text()[-3000:]}")
        return hit

    def join(self) -> None:
        self._t.join(10)

    def finish(self, timeout: float) -> str:
        """Stdout to its end and the exit, within the scaled ``timeout`` (else the process is killed
        and AssertionError). Stderr stays this thread's alone: ``communicate()`` would read it too,
        and close it under the thread."""
        out: list[str] = []
        stdout = self._proc.stdout
        reader = threading.Thread(target=lambda: out.append(stdout.read() if stdout else ""), daemon=True)
        reader.start()
        reader.join(scaled(timeout))
        if reader.is_alive():
            self._proc.kill()
            self._proc.wait(30)
            reader.join(5)  # the pipe's end, before kill() closes it under the reader
            self.kill()
            raise AssertionError(f"no exit in {scaled(timeout):.0f} s; stderr:\n{self.text()[-3000:]}")
        self._proc.wait(10)
        return out[0]

    def kill(self) -> None:
        """End the process if it still runs (the thread reads stderr to its end)."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(30)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
