"""Streaming serving benchmarks (core: no Textual)."""
