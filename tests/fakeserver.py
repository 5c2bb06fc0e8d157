"""A tiny fake inference server for launcher/tracker tests (no GPU, no engine).

    python tests/fakeserver.py --engine sglang|vllm --port P [--load-seconds S]
        [--fault oom|nccl|port|hang|exit|argparse] [--numbered N]

It prints the engine's startup lines (weights n/N, KV, capture, ready) over
``--load-seconds``, then serves ``GET /health`` (200) until TERM. ``--numbered N``
prints ``line 1`` … ``line N`` (one per 10 ms) before the startup lines.
"""

from __future__ import annotations

import argparse
import http.server
import signal
import socket
import sys
import threading
import time


class _Engine:
    """How the faked engine prints: SGLang's ``[time TP0] msg`` or vLLM's ``(EngineCore pid=1) INFO …``."""

    def __init__(self, engine: str) -> None:
        self.sg = engine == "sglang"
        self.out = sys.stdout

    def p(self, msg: str) -> None:
        self.out.write(msg + "\n")
        self.out.flush()

    def raw(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def log(self, msg: str, rank: str = "") -> None:
        if self.sg:
            self.p(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}{' ' + rank if rank else ''}] {msg}")
        else:
            self.p(f"(EngineCore pid=1) INFO {time.strftime('%m-%d %H:%M:%S')} [x.py:1] {msg}")


def _begin(e: _Engine, a: argparse.Namespace, step: float) -> int | None:
    """The arguments and the distributed init; ``--fault nccl`` ends there."""
    e.log(
        "server_args=ServerArgs(model_path='fake', attention_backend='fa3')"
        if e.sg
        else "vLLM API server version 0.0.0"
    )
    if e.sg:
        e.log("Init torch distributed begin.", "TP0")
    else:
        e.log("vLLM is using nccl==2.21.5")
    time.sleep(step)
    if a.fault == "nccl":
        e.p("RuntimeError: NCCL error: remote process exited or there was a network error")
        return 1
    return None


def _weights(e: _Engine, a: argparse.Namespace, step: float) -> int | None:
    """The weight shards n/N; ``--fault exit|hang|oom`` ends (or stops) right after them."""
    if e.sg:
        e.log("Load weight begin. avail mem=70.00 GB", "TP0")
    for n in range(0, a.shards + 1):
        e.raw(
            f"\rLoading safetensors checkpoint shards: {n * 100 // a.shards:3d}% Completed | {n}/{a.shards} [00:00<00:00,  1.00it/s]"
            + ("" if e.sg else "\n")
        )
        if n < a.shards:
            time.sleep(step)
    e.raw("\n")
    if a.fault == "exit":
        return 3
    if a.fault == "hang":
        time.sleep(3600)
    if a.fault == "oom":
        e.p("Traceback (most recent call last):")
        e.p("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
        return 1
    return None


def _kv_and_graphs(e: _Engine, step: float) -> None:
    if e.sg:
        e.log("Load weight end. type=Fake, dtype=torch.bfloat16, avail mem=60.00 GB, mem usage=10.00 GB.", "TP0")
        e.log("KV Cache is allocated. #tokens: 1000, KV size: 1.00 GB", "TP0")
        e.log("Capture cuda graph begin. This can take up to several minutes. avail mem=5.00 GB", "TP0")
    else:
        e.log("Loading weights took 1.00 seconds")
        e.log("Available KV cache memory: 5.00 GiB")
        e.log("GPU KV cache size: 1,000 tokens")
    for n in range(0, 5):
        if e.sg:
            e.raw(
                f"\rCapturing batches (bs={5 - n} avail_mem=5.00 GB): {n * 25:3d}%|##   | {n}/4 [00:00<00:00,  1.00it/s]"
            )
        else:
            e.raw(f"Capturing CUDA graphs (decode, FULL): {n * 25:3d}%|##   | {n}/4 [00:00<00:00,  1.00it/s]\n")
        time.sleep(step / 2)
    e.raw("\n")
    if e.sg:
        e.log("Capture cuda graph end. Time elapsed: 1.00 s. mem usage=0.50 GB. avail mem=4.50 GB.", "TP0")
    else:
        e.log("Graph capturing finished in 1 secs, took 0.50 GiB")


def _serve(e: _Engine, port: int) -> int:
    """``GET /health`` on ``port`` and the ready lines, until TERM; a port in use is the engine's bind error."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind(("127.0.0.1", port))
    except OSError:
        e.p(
            f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): address already in use"
        )
        return 1
    srv.listen(16)

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", port), H, bind_and_activate=False)
    httpd.socket = srv
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    if e.sg:
        e.log(f"INFO:     Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)")
        e.log("The server is fired up and ready to roll!")
    else:
        e.p(
            f"(APIServer pid=1) INFO {time.strftime('%m-%d %H:%M:%S')} [api_server.py:1] Starting vLLM API server 0 on http://127.0.0.1:{port}"
        )
        e.p("(APIServer pid=1) INFO:     Application startup complete.")
    while True:
        time.sleep(1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="sglang")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--load-seconds", type=float, default=1.0)
    ap.add_argument("--fault", default="")
    ap.add_argument("--numbered", type=int, default=0)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--ignore-term", action="store_true")
    a = ap.parse_args()
    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    e = _Engine(a.engine)
    if a.fault == "argparse":
        e.p("usage: fake [options]")
        e.p("fake: error: unrecognized arguments: --bogus")
        return 2
    for i in range(1, a.numbered + 1):
        e.p(f"line {i}")
        time.sleep(0.01)
    step = a.load_seconds / (a.shards + 6)
    rc = _begin(e, a, step)
    if rc is None:
        rc = _weights(e, a, step)
    if rc is not None:
        return rc
    _kv_and_graphs(e, step)
    return _serve(e, a.port)


if __name__ == "__main__":
    raise SystemExit(main())
