"""Streaming serving benchmarks (core: no Textual).

The engine (:data:`ENGINE_MODULES`) needs only the standard library and
Python >= 3.9, so it can run on a GPU host with that host's interpreter
(uvloop is used when present). The CLI (``tui.commands.bench``) and the
UI around it run on the laptop.
"""

#: The modules a benchmark run imports, relative to the folder holding ``tui`` (standard library only).
ENGINE_MODULES = (
    "tui/__init__.py",
    "tui/bench/__init__.py",
    "tui/bench/http.py",
    "tui/bench/sse.py",
    "tui/bench/records.py",
    "tui/bench/client.py",
    "tui/bench/metrics.py",
    "tui/bench/runner.py",
    "tui/bench/store.py",
    "tui/bench/worker.py",
    "tui/util/__init__.py",
    "tui/util/aio.py",
    "tui/util/files.py",
    "tui/util/safety.py",
)
