"""``tunedeck preflight NAME``: check a profile against the host's engine and GPUs before launching."""

from __future__ import annotations

import argparse
import json
import sys

from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._cli import add_dangerous_env_option, add_profile_argument
from tunedeck.profiles.model import ProfileError
from tunedeck.profiles.store import ProfileStore

_MARK = {"error": "✗", "warning": "!", "info": "·"}


async def _preflight(args: argparse.Namespace) -> int:
    from tunedeck.commands._cli import target_label
    from tunedeck.commands._hosterr import report_error
    from tunedeck.commands.profiles import load_named
    from tunedeck.hostops.hosts import HostError
    from tunedeck.profiles.preflight import preflight
    from tunedeck.services.targets import get_host
    from tunedeck.util.safety import UnsafeInput

    store = ProfileStore()
    try:
        profile = load_named(store, args.name)
    except ProfileError as e:
        print(f"tunedeck preflight: {e}", file=sys.stderr)
        return 1  # like launch and profiles: an unknown or unreadable profile is exit 1
    target = target_label(args.demo, args.host)
    try:
        host = get_host(args.host, demo=args.demo)
    except (UnsafeInput, HostError) as e:
        return report_error("preflight", target, e, as_json=args.json)
    try:
        report = await preflight(
            host,
            profile,
            demo=args.demo,
            store=store,
            allow_dangerous=args.allow_dangerous_env,
            use_cache=not args.no_cache,
        )
    except (UnsafeInput, HostError) as e:
        return report_error("preflight", target, e, as_json=args.json)
    finally:
        await host.close()
    if args.json:
        print(json.dumps(report.jsonable(), indent=2, ensure_ascii=False))
    else:
        print(f"pre-flight {profile.name} on {target}:")
        if report.command:
            print(f"  command: {report.command.display}")
        for f in report.findings:
            print(f"  {_MARK.get(f.severity, '?')} {f.severity}: {f.message}")
        n = len(report.errors)
        print(
            f"{'OK' if report.ok else 'FAILED'}: {n} error(s), "
            f"{sum(1 for f in report.findings if f.severity == 'warning')} warning(s)"
        )
    return 0 if report.ok else 1


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        subparsers,
        common,
        "preflight",
        description="Check a profile against the host's engine version, its --help and the GPUs "
        "before a launch; nothing is launched.",
    )
    add_profile_argument(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-cache", action="store_true", help="ask the host again instead of using cached --help facts")
    add_dangerous_env_option(p)
    p.set_defaults(func=_preflight)
