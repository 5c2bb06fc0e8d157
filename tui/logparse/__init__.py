"""The SGLang / vLLM server log parser (incremental).

Feed it bytes as they arrive (``feed``), or whole text; it buffers partial
reads, decodes by the BOM (UTF-8/16/32; else UTF-8 with ``errors="replace"``;
binary content makes the state ``unreadable``), splits on ``[\\r\\n]+`` (tqdm
redraws with ``\\r``), strips ANSI colour, Docker/compose prefixes and the
engines' own prefixes, and turns recognised lines into events:

* :class:`PhaseEvent`: startup phase changes and progress inside a phase
  (weight shards n/N, CUDA-graph capture n/N per capture phase);
* :class:`FactEvent`: facts such as KV-cache tokens, memory, HTTP URL,
  attention backend;
* :class:`ErrorEvent`: a fatal text with its ``kind`` (oom, nccl, port,
  argparse, watchdog, capture-failed, nccl-timeout, cuda-driver, hf-auth,
  remote-code, disk-full, crash), the proving line, the lines before it and
  one line of advice (docs/log-diagnosis.md);
* :class:`StatEvent`: runtime stat lines (SGLang ``Decode batch`` /
  ``Prefill batch``, vLLM ``Avg prompt throughput``).

:attr:`LogParser.state` is the running summary (:class:`ParseState`). The log
alone never proves readiness (the tracker confirms with ``/health`` and the
process); a fatal line after the ready line revokes it (``failure`` wins).
Reference: docs/serving-engines.md section 4.

The package's API is below: import it from ``tunedeck.logparse``. Inside, ``events`` holds
what the parser reports (and its JSON shape), ``patterns`` the engines' line formats and
fatal texts by class, ``sglang`` and ``vllm`` each engine's own start-up and stat lines,
``uvicorn`` the HTTP server lines both print, ``failures`` the tracebacks and fatal texts
of one start, ``parser`` the incremental parser that feeds them lines.
"""

from __future__ import annotations

import re

from tunedeck.logparse.decode import decode_log
from tunedeck.logparse.events import (
    ADVICE,
    ENGINES,
    PHASES,
    ErrorEvent,
    FactEvent,
    LogEvent,
    ParseState,
    PhaseEvent,
    StatEvent,
    event_to_json,
    pick_failure,
)
from tunedeck.logparse.parser import LogParser, iter_events, parse_file, parse_text
from tunedeck.logparse.patterns import LogLine, classify, clean_line, might_be_fatal, severity


def advice_for(diagnosis: str | None, proof: str | None = None) -> str:
    """The one-line advice (docs/log-diagnosis.md) for a run's recorded cause: the failure kind of
    its proving line, else of the cause itself; "" when neither names a known failure (an exit
    status alone, a stop asked for)."""
    for text in (proof, diagnosis):
        if text:
            found = classify(text)
            if found is not None:
                return ADVICE.get(found[0], ADVICE["crash"])
    if diagnosis and _EXCEPTION.match(diagnosis):
        return ADVICE["crash"]  # a root exception of no known kind
    return ""


_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b")


__all__ = [
    "ADVICE",
    "ENGINES",
    "PHASES",
    "ErrorEvent",
    "FactEvent",
    "LogEvent",
    "LogLine",
    "LogParser",
    "ParseState",
    "PhaseEvent",
    "StatEvent",
    "advice_for",
    "classify",
    "clean_line",
    "decode_log",
    "event_to_json",
    "iter_events",
    "might_be_fatal",
    "parse_file",
    "parse_text",
    "pick_failure",
    "severity",
]
