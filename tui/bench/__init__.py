"""Streaming serving benchmarks (core: no Textual).

The engine (:data:`ENGINE_MODULES`) needs only the standard library and
Python >= 3.9, so it can run on a GPU host with that host's interpreter
(uvloop is used when present). The CLI (``tunedeck.commands.bench``) and the
UI around it run on the laptop.

Running it from other code::

    from tunedeck.bench.runner import BenchConfig, NotReady, run_benchmark
    from tunedeck.util.aio import run_async

    summaries = run_async(run_benchmark(
        BenchConfig(url="http://127.0.0.1:8000", concurrency=[1, 32], input_len=512, output_len=256),
        emit=lambda ev: print(json.dumps(ev), flush=True),   # one JSON object per event
        meta_extra={"profile": "p1", "server": {"argv": [...], "env": {...}}},
        client_where="gpu-host",
        results_dir="/path/results",                          # default: data_dir()/results
    ))

``run_benchmark`` raises ValueError for a bad setting (one line naming it)
and :class:`~tunedeck.bench.config.NotReady` when the server does not answer in
``ready_timeout``; cancelling it writes a ``partial`` summary. Each level
writes ``<results_dir>/<run_id>/`` with ``meta.json``, ``samples.jsonl``,
``summary.json`` and ``.lock``. Events are plain dicts; their typed view and
the one parser of a progress line is :class:`tunedeck.bench.records.BenchEvent`.
"""

#: The modules a benchmark run imports, relative to the ``tunedeck`` package's folder (tui/ in the
#: repository; standard library only).
ENGINE_MODULES = (
    "__init__.py",
    "bench/__init__.py",
    "bench/http.py",
    "bench/httpcore.py",
    "bench/httppool.py",
    "bench/httpresponse.py",
    "bench/sse.py",
    "bench/records.py",
    "bench/client.py",
    "bench/counters.py",
    "bench/metrics.py",
    "bench/config.py",
    "bench/prompts.py",
    "bench/workloads/__init__.py",
    "bench/workloads/base.py",
    "bench/workloads/datasets.py",
    "bench/workloads/synthetic.py",
    "bench/health.py",
    "bench/dispatch.py",
    "bench/levels.py",
    "bench/fanout.py",
    "bench/runner.py",
    "bench/store.py",
    "bench/worker.py",
    "util/__init__.py",
    "util/aio.py",
    "util/files.py",
    "util/http.py",
    "util/safety.py",
)
