"""tunedeck: a terminal dashboard for tuning SGLang and vLLM servers."""

__version__ = "0.1.0"

# ``import httpx`` also imports httpx's own command-line client, which loads rich
# and click. tunedeck never uses it; masking it keeps the core free of UI
# libraries and makes start-up cheaper (httpx falls back to a stub ``main``).
import sys as _sys

if "httpx" not in _sys.modules:
    _sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None masks a module (importlib)
