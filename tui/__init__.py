"""tunedeck: a terminal dashboard for tuning SGLang and vLLM servers."""

__version__ = "0.1.0"
