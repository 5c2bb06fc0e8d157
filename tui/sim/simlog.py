"""The simulator's log output: the engines' line prefixes, tqdm frames and model facts, and the
fatal exit an engine failure ends in."""

from __future__ import annotations

import math
import os
import re
import sys
import time
from typing import TypedDict


def fmt_interval(s: float) -> str:
    s = max(0, int(s))
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def fmt_rate(n: int, elapsed: float) -> str:
    if n <= 0 or elapsed <= 0:
        return "?it/s"
    r = n / elapsed
    return f"{r:5.2f}it/s" if r >= 1 else f"{1 / r:5.2f}s/it"


BAR_PARTS = " ▏▎▍▌▋▊▉"


def tqdm_bar(frac: float, width: int = 10) -> str:
    frac = min(1.0, max(0.0, frac))
    full, rem = divmod(int(frac * width * 8), 8)
    s = "█" * full
    if full < width:
        s += (BAR_PARTS[rem] if rem else " ") + " " * (width - full - 1)
    return s


def tqdm_frame(desc: str, n: int, total: int, elapsed: float, *, shards: bool = False) -> str:
    pct = 100.0 * n / total if total else 100.0
    remaining = "?" if n == 0 else fmt_interval(elapsed / n * (total - n))
    tail = f"{n}/{total} [{fmt_interval(elapsed)}<{remaining}, {fmt_rate(n, elapsed)}]"
    if shards:
        return f"{desc}: {pct:3.0f}% Completed | {tail}"
    prefix = f"{desc}: " if desc else ""
    return f"{prefix}{pct:3.0f}%|{tqdm_bar(n / total if total else 1.0)}| {tail}"


def sglang_capture_bs(max_bs: int) -> list[int]:
    bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 513, 16))
    return [b for b in bs if b <= max_bs]


class ModelFacts(TypedDict):
    """What the simulator guesses about a model from its name."""

    params_b: float
    bytes_per_param: float
    mla: bool
    arch: str
    model_type: str
    kv_bytes_per_token: int
    weights_gib_total: float
    layers: int
    shards: int


def model_facts(model: str, tp: int) -> ModelFacts:
    """Guess size, architecture and KV footprint from the model name (sim only)."""
    low = model.lower()
    m = re.findall(r"(\d+(?:\.\d+)?)\s*b(?![a-z])", low)
    params = float(m[-1]) if m else 70.0
    mla = "deepseek" in low and ("v3" in low or "r1" in low or "v2" in low)
    if "deepseek" in low and not m:
        params = 671.0
    if re.search(r"fp8|int8|w8a8", low) or (mla and params > 600):
        bpp = 1.0
    elif re.search(r"int4|awq|gptq|w4a16|nvfp4|mxfp4", low):
        bpp = 0.5
    else:
        bpp = 2.0
    if mla:
        arch, mtype = "DeepseekV3ForCausalLM", "deepseek_v3"
        per_token = 61 * 576 * 2  # latent KV, replicated on every rank
        layers = 61
    else:
        if "qwen3" in low:
            arch, mtype = "Qwen3ForCausalLM", "qwen3"
        elif "qwen" in low:
            arch, mtype = "Qwen2ForCausalLM", "qwen2"
        elif "mistral" in low or "mixtral" in low:
            arch, mtype = "MistralForCausalLM", "mistral"
        else:
            arch, mtype = "LlamaForCausalLM", "llama"
        layers = 80 if params >= 60 else (48 if params >= 20 else 32)
        kv_heads = 8
        per_token = 2 * layers * max(1, kv_heads // max(1, tp)) * 128 * 2
    weights_gib = params * 1e9 * bpp / (1 << 30)
    return {
        "params_b": params,
        "bytes_per_param": bpp,
        "mla": mla,
        "arch": arch,
        "model_type": mtype,
        "kv_bytes_per_token": per_token,
        "weights_gib_total": weights_gib,
        "layers": layers,
        "shards": max(1, min(163, math.ceil(weights_gib / 4.6))),
    }


class Log:
    """Writes the engine's log prefixes to stdout, one flush per write."""

    def __init__(self, engine: str, pid: int) -> None:
        self.engine = engine
        self.pid = pid
        self.ms = os.environ.get("SGLANG_LOG_MS", "") not in ("", "0")
        self.out = sys.stdout
        #: the first global rank on this node: a second node's schedulers are TP8..TP15 at tp 16
        self.rank_base = 0

    def raw(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (BrokenPipeError, ValueError):
            pass

    def ts(self) -> str:
        t = time.time()
        s = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
        return f"{s}.{int(t * 1000) % 1000:03d}" if self.ms else s

    def sg(self, msg: str, rank: int | None = None) -> None:
        r = f" TP{rank + self.rank_base}" if rank is not None else ""
        self.raw(f"[{self.ts()}{r}] {msg}\n")

    def vl(
        self,
        msg: str,
        *,
        proc: str = "APIServer",
        pid: int | None = None,
        level: str = "INFO",
        where: str = "api_server.py:1",
        ip: str | None = None,
    ) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        at = f", ip={ip}" if ip else ""  # a Ray actor's line, as Ray prefixes it on the driver
        self.raw(f"({proc} pid={pid or self.pid}{at}) {level} {stamp} [{where}] {msg}\n")

    def uvicorn(self, msg: str, level: str = "INFO") -> None:
        pad = f"{level}:".ljust(9)
        if self.engine == "sglang":
            self.raw(f"[{self.ts()}] {pad} {msg}\n")
        else:
            self.raw(f"(APIServer pid={self.pid}) {pad} {msg}\n")


class Fatal(Exception):
    """Start-up ends like a real failure: the text is already printed; ``code`` is the exit."""

    def __init__(self, code: int, kill: bool = False) -> None:
        super().__init__(code)
        self.code = code
        self.kill = kill


# ====================================================================== the simulator
