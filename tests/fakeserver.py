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
    out = sys.stdout
    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    def p(msg: str) -> None:
        out.write(msg + "\n")
        out.flush()

    def ts() -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S")

    sg = a.engine == "sglang"

    def log(msg: str, rank: str = "") -> None:
        if sg:
            p(f"[{ts()}{' ' + rank if rank else ''}] {msg}")
        else:
            p(f"(EngineCore pid=1) INFO {time.strftime('%m-%d %H:%M:%S')} [x.py:1] {msg}")

    if a.fault == "argparse":
        p("usage: fake [options]")
        p("fake: error: unrecognized arguments: --bogus")
        return 2
    for i in range(1, a.numbered + 1):
        p(f"line {i}")
        time.sleep(0.01)
    step = a.load_seconds / (a.shards + 6)
    log("server_args=ServerArgs(model_path='fake', attention_backend='fa3')" if sg else "vLLM API server version 0.0.0")
    if sg:
        log("Init torch distributed begin.", "TP0")
    else:
        log("vLLM is using nccl==2.21.5")
    time.sleep(step)
    if a.fault == "nccl":
        p("RuntimeError: NCCL error: remote process exited or there was a network error")
        return 1
    if sg:
        log("Load weight begin. avail mem=70.00 GB", "TP0")
    for n in range(0, a.shards + 1):
        out.write(
            f"\rLoading safetensors checkpoint shards: {n * 100 // a.shards:3d}% Completed | {n}/{a.shards} [00:00<00:00,  1.00it/s]"
        )
        if not sg:
            out.write("\n")
        out.flush()
        if n < a.shards:
            time.sleep(step)
    out.write("\n")
    if a.fault == "exit":
        out.flush()
        return 3
    if a.fault == "hang":
        out.flush()
        time.sleep(3600)
    if a.fault == "oom":
        p("Traceback (most recent call last):")
        p("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
        return 1
    if sg:
        log("Load weight end. type=Fake, dtype=torch.bfloat16, avail mem=60.00 GB, mem usage=10.00 GB.", "TP0")
        log("KV Cache is allocated. #tokens: 1000, KV size: 1.00 GB", "TP0")
        log("Capture cuda graph begin. This can take up to several minutes. avail mem=5.00 GB", "TP0")
    else:
        log("Loading weights took 1.00 seconds")
        log("Available KV cache memory: 5.00 GiB")
        log("GPU KV cache size: 1,000 tokens")
    for n in range(0, 5):
        if sg:
            out.write(
                f"\rCapturing batches (bs={5 - n} avail_mem=5.00 GB): {n * 25:3d}%|##   | {n}/4 [00:00<00:00,  1.00it/s]"
            )
        else:
            out.write(f"Capturing CUDA graphs (decode, FULL): {n * 25:3d}%|##   | {n}/4 [00:00<00:00,  1.00it/s]\n")
        out.flush()
        time.sleep(step / 2)
    out.write("\n")
    if sg:
        log("Capture cuda graph end. Time elapsed: 1.00 s. mem usage=0.50 GB. avail mem=4.50 GB.", "TP0")
    else:
        log("Graph capturing finished in 1 secs, took 0.50 GiB")
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind(("127.0.0.1", a.port))
    except OSError:
        p(
            f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {a.port}): address already in use"
        )
        return 1
    srv.listen(16)

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", a.port), H, bind_and_activate=False)
    httpd.socket = srv
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    if sg:
        log(f"INFO:     Uvicorn running on http://127.0.0.1:{a.port} (Press CTRL+C to quit)")
        log("The server is fired up and ready to roll!")
    else:
        p(
            f"(APIServer pid=1) INFO {time.strftime('%m-%d %H:%M:%S')} [api_server.py:1] Starting vLLM API server 0 on http://127.0.0.1:{a.port}"
        )
        p("(APIServer pid=1) INFO:     Application startup complete.")
    while True:
        time.sleep(1)


if __name__ == "__main__":
    raise SystemExit(main())
