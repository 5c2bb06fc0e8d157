"""``tunedeck trust TARGET [--yes] [--json]``: trust a host's SSH key after comparing its fingerprint."""

from __future__ import annotations

import argparse
import json
import sys

from tunedeck.commands import Subparsers, add_command
from tunedeck.commands._ask import add_yes_option, confirm
from tunedeck.commands._cli import add_target_argument, given_target
from tunedeck.commands._hosterr import report_error
from tunedeck.hostops.hosts import HostError
from tunedeck.hostops.target import parse_target
from tunedeck.util.paths import known_hosts_file
from tunedeck.util.safety import UnsafeInput


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = add_command(
        subparsers,
        common,
        "trust",
        description="Fetch TARGET's SSH host key, print its SHA256 fingerprint and, after you confirm "
        "(or with --yes), add it to tunedeck's known_hosts. Compare the fingerprint with the one "
        "the host itself shows (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) first. A host whose "
        "key CHANGED is refused; remove the old line yourself if the change is expected.",
    )
    add_target_argument(p, "[user@]host[:port] or an ssh alias")
    add_yes_option(p, "trust without asking (after comparing)")
    p.add_argument(
        "--fingerprint",
        metavar="SHA256:…",
        help="trust only a key with this fingerprint (got from the host's console); no question asked",
    )
    p.add_argument("--json", action="store_true", help="print the result as a JSON object")
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from tunedeck.hostops.trust import add_trusted, check_host

    target = given_target(args)
    if not target or target == "local" or args.demo:
        print("tunedeck trust: give a remote TARGET ([user@]host[:port] or an ssh alias)", file=sys.stderr)
        return 2
    try:
        t = parse_target(target)
        if t.is_local:
            print("tunedeck trust: 'local' needs no host key", file=sys.stderr)
            return 2
        check = await check_host(t)
    except (HostError, UnsafeInput) as e:
        return report_error("trust", target, e, as_json=args.json)

    ep = check.endpoint
    out = check.as_dict()
    say = sys.stderr if args.json else sys.stdout

    def done(result: str, code: int) -> int:
        out["result"] = result
        if args.json:
            print(json.dumps(out, indent=2))
        return code

    print(f"{ep.known_hosts_name} presents a {check.key_type} key", file=say)
    print(f"  fingerprint: {check.fingerprint}", file=say)
    if check.status == "trusted":
        print("already trusted: nothing to do", file=say)
        return done("already-trusted", 0)
    if check.status == "mismatch":
        olds = ", ".join(f"{fp} (in {f})" for f, fp in check.known)
        print(
            f"tunedeck trust: {target}: HOST KEY MISMATCH: known key {olds}, but the server now presents "
            f"{check.fingerprint}. Not trusting it. If the host was reinstalled, remove the old line "
            "from that file yourself and run trust again.",
            file=sys.stderr,
        )
        return done("mismatch", 1)
    if args.fingerprint is not None:
        if args.fingerprint.strip() != check.fingerprint:
            print(
                f"tunedeck trust: {target}: the server presents {check.fingerprint}, not the expected "
                f"{args.fingerprint.strip()!r}; nothing written",
                file=sys.stderr,
            )
            return done("fingerprint-mismatch", 1)
    elif not args.yes and not sys.stdin.isatty():
        # the advice names what to compare first (the prompt's own line would only say --yes)
        print("tunedeck trust: not a terminal: compare the fingerprint above, then rerun with --yes", file=sys.stderr)
        return done("not-confirmed", 1)
    elif not await confirm(f"Trust this key for {ep.known_hosts_name}?", prog="trust", yes=args.yes):
        print("not trusted; nothing written", file=say)
        return done("refused", 1)
    path = add_trusted(check)
    print(f"trusted: added {ep.known_hosts_name} to {path}", file=say)
    out["known_hosts_file"] = str(path)
    return done("trusted", 0)


__all__ = ["known_hosts_file", "register", "run"]
