"""``tunedeck launch NAME|--cmd …``: start a server detached on the host, optionally wait until ready."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Callable

from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._cli import fail
from tunedeck.commands._runs import WAIT_EXIT, host_from_args, wait_ended
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.hostops.launcher import LaunchRefused, demo_argv, launch, stop_command
from tunedeck.hostops.runstore import ENGINES, RunRecord, RunStore
from tunedeck.hostops.startupstate import format_progress
from tunedeck.hostops.tracker import StartupTracker
from tunedeck.model import StartupProgress, jsonable
from tunedeck.profiles.model import ProfileError, ServerProfile
from tunedeck.services import runtime
from tunedeck.services.journal import journal_launch
from tunedeck.util.safety import UnsafeInput, check_env_name, dangerous_env_names, visible


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        subparsers,
        common,
        "launch",
        description="Start a server detached on the host (it survives SSH loss and dashboard exit) "
        "with a run folder there and a local record. With --wait, follow the startup and exit 0 "
        "once ready, non-zero with the diagnosis when it fails.",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="profile name")
    p.add_argument("--engine", choices=ENGINES, help="engine of a raw --cmd (default: from the command)")
    p.add_argument("--port", type=int, help="HTTP port (overrides the profile's; for a raw --cmd: where /health is)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra environment (repeatable)")
    p.add_argument(
        "--allow-dangerous-env",
        action="store_true",
        help="accept --env LD_PRELOAD, PATH, PYTHONPATH, … (they change what gets executed)",
    )
    p.add_argument("--wait", action="store_true", help="follow the startup until ready or failed")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="give up waiting after S seconds")
    p.add_argument(
        "--stall-after",
        type=_stall_after,
        default=(300.0, "warn"),
        metavar="S[:ACTION]",
        help="with --wait: a live run with no log output, progress or GPU-memory change for S seconds is "
        "stalled; ACTION warn (default: report it and leave it running) or stop (stop it). "
        "E.g. 300, stop, 600:stop",
    )
    p.add_argument("--json", action="store_true", help="print the run record (and the final progress) as JSON")
    p.add_argument(
        "--no-preflight",
        action="store_true",
        help="multi-node profiles: skip the checks on every node (versions, GPUs, port, reachability)",
    )
    p.add_argument("--cmd", nargs=argparse.REMAINDER, metavar="ARGV", help="raw command to run (the rest of the line)")
    p.set_defaults(func=run)


def _stall_after(text: str) -> tuple[float, str]:
    from tunedeck.hostops.startupstate import parse_stall_after

    try:
        return parse_stall_after(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _guess_engine(argv: list[str]) -> str:
    text = " ".join(argv[:4]).lower()
    if "sglang" in text:
        return "sglang"
    if "vllm" in text:
        return "vllm"
    return "other"


def _guess_port(argv: list[str], engine: str) -> int | None:
    for i, a in enumerate(argv):
        if a.startswith("--port="):
            v = a.split("=", 1)[1]
            return int(v) if v.isdigit() else None
        if a == "--port" and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
    return {"sglang": 30000, "vllm": 8000}.get(engine)


def _sim_exe(prof: ServerProfile) -> list[str]:
    from tunedeck.profiles.deploy import sim_executable

    return sim_executable(prof)


def _from_profile(
    name: str, demo: bool, port: int | None = None, sim: bool = False
) -> tuple[list[str], dict[str, str], str, int | None]:
    """(argv, env, engine, port) for a saved profile (the demo swaps in the simulator);
    ``port`` overrides the profile's port."""
    from tunedeck.profiles.builder import build_command
    from tunedeck.profiles.store import ProfileStore

    prof = ProfileStore().get(name)
    if port is not None:
        prof = prof.with_(port=port)
    cmd = build_command(prof, demo=demo, executable=_sim_exe(prof) if sim else None)
    argv = list(cmd.argv)
    if demo:
        argv = demo_argv(argv)
    return argv, cmd.env_dict, prof.engine, prof.effective_port


async def run(args: argparse.Namespace) -> int:
    if bool(args.name) == bool(args.cmd):
        return fail("launch", "give a profile NAME or --cmd ARGV… (one of them)")
    prof: ServerProfile | None = None
    if args.name:
        from tunedeck.profiles.store import ProfileStore

        try:
            prof = ProfileStore().get(args.name)
        except ProfileError as e:
            return fail("launch", str(e))
        except (OSError, ValueError, KeyError, LookupError):
            prof = None  # reported below, as before
        if prof is not None and prof.multi_node:
            from tunedeck.commands import _deploy

            return await _deploy.launch(args, prof)
    try:
        argv, env, engine, port, profile = _what_to_run(args)
    except UnsafeInput as e:
        return fail("launch", str(e))
    except ProfileError as e:
        return fail("launch", str(e))
    except (OSError, ValueError, KeyError, LookupError) as e:
        return fail("launch", f"profile {args.name!r}: {e}")
    host = host_from_args(args)
    store = RunStore()
    try:
        if args.sim and prof is not None:
            # the simulator from the host-side runtime (shipped if needed, the profile's python first)
            argv = await runtime.sim_argv(host, argv, python=prof.python)
        rec = await launch(host, argv, env, engine=engine, port=port, profile=profile, store=store)
    except LaunchRefused as e:
        return fail("launch", f"refused: {e}")
    except (UnsafeInput, HostError, runtime.RuntimeUnavailable) as e:
        return fail("launch", str(e))
    if not args.json:
        print(
            f"launched run {rec.run_id} on {rec.target} (pid {rec.pid}); log: {rec.run_dir}/log",
            file=sys.stderr if args.wait else sys.stdout,
        )
    if not args.wait:
        if args.json:
            print(json.dumps(jsonable(rec.to_json()), indent=2))
        await host.close()
        return 0
    tty = sys.stderr.isatty()
    stall_s, stall_action = args.stall_after
    tracker = StartupTracker(host, rec, store=store, stall_after=stall_s, stall_action=stall_action)
    t0 = time.monotonic()
    try:
        final = await tracker.run(timeout=args.timeout, on_update=_progress_printer(tty))
    finally:
        await host.close()
    if tty:
        sys.stderr.write("\n")
    out = store.load(rec.run_id) or rec
    if final.state != "starting":
        warning = journal_launch(out, final, profile=args.name)
        if warning:
            print(f"tunedeck launch: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps({"run": jsonable(out.to_json()), "progress": jsonable(final)}, indent=2))
    return _verdict(args, host, rec, final, time.monotonic() - t0)


def _extra_env(args: argparse.Namespace) -> dict[str, str]:
    """The ``--env NAME=VALUE`` items; a name that changes what gets executed needs
    ``--allow-dangerous-env``."""
    env: dict[str, str] = {}
    for item in args.env:
        if "=" not in item:
            raise UnsafeInput(f"--env {item!r}: expected NAME=VALUE")
        k, v = item.split("=", 1)
        env[check_env_name(k, "--env")] = v
    risky = dangerous_env_names(env)
    if risky and not args.allow_dangerous_env:
        raise UnsafeInput(f"--env {', '.join(risky)}: changes what gets executed; add --allow-dangerous-env to confirm")
    return env


def _what_to_run(args: argparse.Namespace) -> tuple[list[str], dict[str, str], str, int | None, str | None]:
    """(argv, env, engine, port, profile name) of a raw ``--cmd`` or of the profile ``NAME``."""
    env = _extra_env(args)
    if args.cmd:
        argv = list(args.cmd)
        if argv and argv[0] == "--":
            argv = argv[1:]
        if not argv:
            raise UnsafeInput("--cmd needs a command")
        engine = args.engine or _guess_engine(argv)
        port = args.port if args.port is not None else _guess_port(argv, engine)
        return argv, env, engine, port, None
    argv, penv, engine, port = _from_profile(args.name, args.demo, args.port, args.sim)
    return argv, {**penv, **env}, args.engine or engine, port, args.name


def _progress_printer(tty: bool) -> Callable[[StartupProgress], None]:
    """Startup progress on stderr: one line redrawn on a terminal, else a line per change."""
    last = [""]

    def show(snap: StartupProgress) -> None:
        line = format_progress(snap)
        if tty:
            sys.stderr.write("\r\x1b[2K" + line)
            sys.stderr.flush()
        else:
            key = f"{snap.phase}|{snap.phase_n}|{snap.state}|{snap.stalled}"
            if key != last[0]:
                last[0] = key
                sys.stderr.write(line + "\n")
                sys.stderr.flush()

    return show


def _verdict(args: argparse.Namespace, host: Host, rec: RunRecord, final: StartupProgress, waited: float) -> int:
    """The exit status of ``launch --wait`` for the startup's final state, with its one-line report."""
    what = f"run {rec.run_id}"
    code = wait_ended(args, final.state, what, f"after {waited:.1f} s", "tunedeck stop", f" ({final.message})")
    if code is not None:
        return code
    if final.state == "stalled":
        fail("launch", f"{what} {final.diagnosis}; it keeps running ({stop_command(host, rec.run_id)} to end it)")
    elif final.state == "stopped":
        fail("launch", f"{what} {final.diagnosis}")
    else:
        fail("launch", f"{what} failed: {final.diagnosis}")
    if final.proof:
        print(f"  log: {visible(final.proof)}", file=sys.stderr)
    return WAIT_EXIT.get(final.state, 1)
