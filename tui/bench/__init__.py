"""Streaming serving benchmarks (core: no Textual).

``import httpx`` also imports httpx's command-line client (``httpx._main``),
which pulls in rich and click. tunedeck never uses that CLI, so it is masked
here before httpx is first imported: the core keeps running without any UI
library loaded (tests/test_architecture.py).
"""

import sys as _sys

if "httpx" not in _sys.modules:
    _sys.modules.setdefault("httpx._main", None)  # type: ignore[assignment]
