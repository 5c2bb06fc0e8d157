"""Host facts in one round trip: the base of pre-flight checks (``tunedeck probe``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tunedeck.hostops.hosts import Host, HostError
from tunedeck.util.records import pick

ENGINES = ("sglang", "vllm")

#: Runs under /bin/sh -s on the host; prints ``key=value`` lines only.
PROBE_SCRIPT = r"""
kv() { printf '%s=%s\n' "$1" "$2"; }
kv hostname "$(hostname 2>/dev/null || cat /proc/sys/kernel/hostname 2>/dev/null)"
if [ -r /etc/os-release ]; then
  kv os "$(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | head -n 1 | sed 's/^"//; s/"$//')"
fi
kv kernel "$(uname -r 2>/dev/null)"
kv arch "$(uname -m 2>/dev/null)"
kv cpus "$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null)"
kv mem_kb "$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null)"
py=$(command -v python3 2>/dev/null)
kv python_path "$py"
if [ -n "$py" ]; then
  kv python_version "$("$py" -c 'import platform; print(platform.python_version())' 2>/dev/null)"
  timeout -k 2 60 "$py" - <<'PYEOF' 2>/dev/null
import importlib, importlib.metadata as md, importlib.util
for name in ("sglang", "vllm"):
    v = ""
    try:
        v = md.version(name)
    except Exception:
        try:
            if importlib.util.find_spec(name) is not None:
                v = str(getattr(importlib.import_module(name), "__version__", "unknown"))
        except Exception as e:
            v = "broken (" + type(e).__name__ + ")"
    print("engine_" + name + "=" + v)
PYEOF
fi
smi=$(command -v nvidia-smi 2>/dev/null)
kv nvidia_smi_path "$smi"
if [ -n "$smi" ]; then
  out=$(timeout -k 2 15 "$smi" -L 2>&1); rc=$?
  kv nvidia_smi_rc "$rc"
  printf '%s\n' "$out" | sed -n 's/^GPU [0-9][0-9]*: \(.*\) (UUID:.*$/gpu=\1/p; s/^GPU [0-9][0-9]*: \([^(]*\)$/gpu=\1/p'
  if [ "$rc" -ne 0 ]; then kv nvidia_smi_error "$(printf '%s' "$out" | head -n 1)"; fi
fi
exit 0
"""


@dataclass
class ProbeResult:
    target: str
    hostname: str | None = None
    os: str | None = None
    kernel: str | None = None
    arch: str | None = None
    cpus: int | None = None
    memory_bytes: int | None = None
    python_version: str | None = None
    python_path: str | None = None
    nvidia_smi: str | None = None
    nvidia_smi_error: str | None = None
    gpu_count: int | None = None
    gpus: list[str] = field(default_factory=list)
    engines: dict[str, str | None] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            **pick(self, "target", "hostname", "os", "kernel", "arch", "cpus", "memory_bytes"),
            "python": {"version": self.python_version, "path": self.python_path} if self.python_path else None,
            "nvidia_smi": {
                "present": self.nvidia_smi is not None,
                "path": self.nvidia_smi,
                "gpu_count": self.gpu_count,
                "gpus": list(self.gpus),
                "error": self.nvidia_smi_error,
            },
            "engines": {name: {"installed": v is not None, "version": v} for name, v in self.engines.items()},
        }


def _int(v: str | None) -> int | None:
    return int(v) if v and v.strip().isdigit() else None


def parse_probe_output(target: str, text: str) -> ProbeResult:
    kv: dict[str, str] = {}
    gpus: list[str] = []
    engines: dict[str, str | None] = {e: None for e in ENGINES}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if key == "gpu":
            gpus.append(value)
        elif key.startswith("engine_") and key[7:] in engines:
            engines[key[7:]] = value or None
        else:
            kv[key] = value
    smi = kv.get("nvidia_smi_path") or None
    rc = _int(kv.get("nvidia_smi_rc"))
    mem = _int(kv.get("mem_kb"))
    return ProbeResult(
        target=target,
        hostname=kv.get("hostname") or None,
        os=kv.get("os") or None,
        kernel=kv.get("kernel") or None,
        arch=kv.get("arch") or None,
        cpus=_int(kv.get("cpus")),
        memory_bytes=mem * 1024 if mem is not None else None,
        python_version=kv.get("python_version") or None,
        python_path=kv.get("python_path") or None,
        nvidia_smi=smi,
        nvidia_smi_error=kv.get("nvidia_smi_error") or (f"nvidia-smi -L exited {rc}" if rc else None),
        gpu_count=len(gpus) if smi and rc == 0 else None,
        gpus=gpus,
        engines=engines,
    )


async def probe_host(host: Host, *, timeout: float = 90.0) -> ProbeResult:
    """Collect host facts with ONE remote script. Raises HostError when the host cannot run it."""
    r = await host.run_script(PROBE_SCRIPT, timeout=timeout)
    if r.lost:
        raise HostError("connection-lost", "connection lost while probing", target=host.target)
    if r.timed_out:
        raise HostError("timeout", f"probe did not finish within {timeout:g} s", target=host.target)
    if r.exit_status != 0:
        raise HostError("error", f"probe script failed ({r.exit_status}): {r.stderr.strip()[:300]}", target=host.target)
    return parse_probe_output(host.target, r.stdout)
