"""``tunedeck probe [TARGET] [--json]``: host facts (OS, CPUs, memory, Python, GPUs, engines)."""

from __future__ import annotations

import argparse
import json

from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._cli import add_target_argument, given_target, target_label
from tunedeck.commands._hosterr import report_error
from tunedeck.fmt import gib, text_table
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.probe import ProbeResult, probe_host
from tunedeck.services import runtime
from tunedeck.services.targets import get_host
from tunedeck.util.safety import UnsafeInput, visible


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        subparsers,
        common,
        "probe",
        description="Connect to TARGET (default: --host, else this machine) and report hostname, OS, "
        "kernel, CPU count, memory, python3, nvidia-smi and GPU count, and the installed "
        "SGLang/vLLM versions. One remote script, one round trip.",
    )
    add_target_argument(p, "'local', [user@]host[:port] or an ssh alias")
    p.add_argument("--json", action="store_true", help="print the facts as a JSON object")
    p.set_defaults(func=run)


def format_table(r: ProbeResult, rt: dict[str, object] | None = None) -> str:
    smi = "not found"
    if r.nvidia_smi:
        if r.gpu_count is None:
            smi = f"{r.nvidia_smi} (error: {r.nvidia_smi_error or 'N/A'})"
        else:
            names = sorted(set(r.gpus))
            smi = f"{r.nvidia_smi}, {r.gpu_count} GPU{'s' if r.gpu_count != 1 else ''}"
            if names:
                smi += f" ({', '.join(names)})"
    rows = [
        ("target", r.target),
        ("hostname", r.hostname or "N/A"),
        ("os", r.os or "N/A"),
        ("kernel", f"{r.kernel or 'N/A'}" + (f" ({r.arch})" if r.arch else "")),
        ("cpus", "N/A" if r.cpus is None else str(r.cpus)),
        ("memory", gib(r.memory_bytes, " GiB")),
        ("python3", f"{r.python_version or 'unknown version'} ({r.python_path})" if r.python_path else "not found"),
        ("nvidia-smi", smi),
    ]
    for name, v in r.engines.items():
        rows.append((name, v if v else "not installed"))
    if rt is not None:
        if rt.get("python"):
            shipped = "shipped" if rt.get("shipped") else "ships on first use"
            rows.append(("runtime", f"Python {rt.get('python_version')} ({rt.get('python')}), {shipped}"))
        else:
            rows.append(("runtime", str(rt.get("problem"))))
    # every value but the labels came from the host (its name, paths, versions, GPU names, errors)
    return "\n".join(text_table(None, [(k, visible(v)) for k, v in rows]))


async def _demo_engines(host: Host, result: ProbeResult) -> None:
    """The demo's engines are the simulator: ask it their versions (as pre-flight does), instead
    of reporting the real packages as "not installed"."""
    from tunedeck.profiles.builder import demo_executable
    from tunedeck.profiles.hostfacts import parse_version

    for eng in list(result.engines):
        try:
            r = await host.run([*demo_executable(eng), "--version"], timeout=30)
        except HostError:
            continue
        v = parse_version(r.stdout) if r.ok else None
        if v:
            result.engines[eng] = f"{v} (simulated)"


async def run(args: argparse.Namespace) -> int:
    target = given_target(args)
    where = target_label(args.demo, target)
    try:
        host = get_host(target, demo=args.demo)
    except (UnsafeInput, HostError) as e:
        return report_error("probe", where, e, as_json=args.json)
    try:
        async with host:
            result = await probe_host(host)
            if args.demo:
                await _demo_engines(host, result)
            rt = await runtime.describe(host)
    except (HostError, UnsafeInput) as e:
        return report_error("probe", where, e, as_json=args.json)
    if args.json:
        print(json.dumps({**result.as_dict(), "runtime": rt}, indent=2))
    else:
        print(format_table(result, rt))
    return 0
