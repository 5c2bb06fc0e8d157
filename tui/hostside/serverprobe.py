"""A server's own figures read on the host's loopback by the host sampler: ``/health``,
``/metrics`` (only the engine's own series) and ``/v1/models``, with the standard library's HTTP.
Python >= 3.9."""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any, Dict

#: /metrics lines kept (the rest of an engine's exposition is dropped on the host)
METRIC_PREFIXES = ("sglang:", "vllm:")


def http_get(port: int, path: str, timeout: float) -> Dict[str, Any]:
    """``GET http://127.0.0.1:PORT/PATH``: ``{status, error, body}`` (``error`` refused/timeout/text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Accept": "*/*"})
        r = conn.getresponse()
        body = r.read(8 * 1024 * 1024).decode("utf-8", "replace")
        return {"status": r.status, "error": "", "body": body}
    except ConnectionRefusedError:
        return {"status": None, "error": "refused", "body": "connection refused"}
    except socket.timeout:
        return {"status": None, "error": "timeout", "body": ""}
    except (OSError, http.client.HTTPException) as e:
        return {"status": None, "error": f"{type(e).__name__}: {e}"[:200], "body": ""}
    finally:
        conn.close()


def filter_metrics(text: str) -> str:
    """Only the engine's own series (and their HELP/TYPE lines): a fraction of the exposition."""
    keep = []
    for line in text.splitlines():
        name = line[7:] if line.startswith(("# HELP ", "# TYPE ")) else line
        if name.startswith(METRIC_PREFIXES):
            keep.append(line)
    return "\n".join(keep) + ("\n" if keep else "")


def probe_server(port: int, run_id: str, timeout: float, models: Dict[int, str]) -> Dict[str, Any]:
    """The ``server`` line of one live server: its ``/health``; unless refused, its ``/metrics``
    and, until ``models`` (port -> the served model, kept across calls) knows it, its ``/v1/models``."""
    health = http_get(port, "/health", timeout)
    msg: Dict[str, Any] = {
        "t": "server",
        "time": time.time(),
        "port": port,
        "run_id": run_id,
        "health": {"status": health["status"], "error": health["error"], "body": health["body"][:300]},
    }
    if health["error"] != "refused":
        metrics = http_get(port, "/metrics", timeout)
        if metrics["status"] == 200:
            metrics["body"] = filter_metrics(metrics["body"])
        else:
            metrics["body"] = metrics["body"][:300]
        msg["metrics"] = metrics
        if health["status"] == 200 and port not in models:
            answer = http_get(port, "/v1/models", timeout)
            try:
                data = json.loads(answer["body"]).get("data") or []
                model = str(data[0]["id"]) if data and isinstance(data[0], dict) else ""
            except (ValueError, AttributeError, KeyError):
                model = ""
            if model:
                models[port] = model
    if port in models:
        msg["model"] = models[port]
    return msg


__all__ = ["METRIC_PREFIXES", "filter_metrics", "http_get", "probe_server"]
