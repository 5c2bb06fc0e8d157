"""Streaming serving benchmarks (core: no Textual).

The engine (:data:`ENGINE_MODULES`) needs only the standard library and
Python >= 3.9, so it can run on a GPU host with that host's interpreter
(uvloop is used when present). The CLI (``tui.commands.bench``) and the
UI around it run on the laptop.

Running it from other code::

    from tui.bench.runner import BenchConfig, NotReady, run_benchmark
    from tui.util.aio import run_async

    summaries = run_async(run_benchmark(
        BenchConfig(url="http://127.0.0.1:8000", concurrency=[1, 32], input_len=512, output_len=256),
        emit=lambda ev: print(json.dumps(ev), flush=True),   # one JSON object per event
        meta_extra={"profile": "p1", "server": {"argv": [...], "env": {...}}},
        client_where="gpu-host",
        results_dir="/path/results",                          # default: data_dir()/results
    ))

``run_benchmark`` raises ValueError for a bad setting (one line naming it)
and :class:`~tui.bench.config.NotReady` when the server does not answer in
``ready_timeout``; cancelling it writes a ``partial`` summary. Each level
writes ``<results_dir>/<run_id>/`` with ``meta.json``, ``samples.jsonl``,
``summary.json`` and ``.lock``. Events are plain dicts; their typed view and
the one parser of a progress line is :class:`tui.bench.records.BenchEvent`.
"""

#: The modules a benchmark run imports, relative to the ``tunedeck`` package's folder (tui/ in the
#: repository; standard library only).
ENGINE_MODULES = (
    "tui/__init__.py",
    "tui/bench/__init__.py",
    "tui/bench/http.py",
    "tui/bench/httpcore.py",
    "tui/bench/httppool.py",
    "tui/bench/httpresponse.py",
    "tui/bench/sse.py",
    "tui/bench/records.py",
    "tui/bench/client.py",
    "tui/bench/counters.py",
    "tui/bench/metrics.py",
    "tui/bench/config.py",
    "tui/bench/prompts.py",
    "tui/bench/workloads/__init__.py",
    "tui/bench/workloads/base.py",
    "tui/bench/workloads/datasets.py",
    "tui/bench/workloads/synthetic.py",
    "tui/bench/health.py",
    "tui/bench/dispatch.py",
    "tui/bench/levels.py",
    "tui/bench/fanout.py",
    "tui/bench/runner.py",
    "tui/bench/store.py",
    "tui/bench/worker.py",
    "tui/util/__init__.py",
    "tui/util/aio.py",
    "tui/util/files.py",
    "tui/util/http.py",
    "tui/util/safety.py",
)
