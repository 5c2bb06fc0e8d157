"""Write (or check) a release's flag table from its own ``--help``.

    python scripts/engine_flags.py sglang 0.5.23 --help-file sglang-0.5.23-launch_server-help.txt
    python scripts/engine_flags.py vllm 0.33.0 -- vllm serve --help=all      # an installed engine
    python scripts/engine_flags.py sglang 0.5.23 --help-file FILE --check     # exit 1 when it differs

The table goes to ``tui/engine_flags/<engine>-<release>.txt`` (see :mod:`tunedeck.engine_flags`); a new
release also needs ``tui/engines.py``'s version bumped so that tunedeck follows it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tunedeck.engine_flags import parse_help, render_table, table_file


def derive(engine: str, release: str, text: str, source: str) -> str:
    """The table's text for ``engine`` ``release`` from its help ``text``; ValueError when it lists no flags."""
    flags = parse_help(text)
    if len(flags) < 3:
        raise ValueError(f"{source}: no argparse options found (is this a --help output?)")
    return render_table(engine, release, flags, source)


def target(engine: str, release: str) -> Path:
    """The committed table: ``tui/engine_flags/<engine>-<release>.txt`` (the package's folder here)."""
    return REPO / "tui" / "engine_flags" / table_file(engine, release)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=["sglang", "vllm"])
    ap.add_argument("release", help="the release the help belongs to, e.g. 0.5.23")
    ap.add_argument("--help-file", type=Path, help="a saved --help output")
    ap.add_argument("--check", action="store_true", help="only compare with the committed table")
    ap.add_argument("command", nargs="*", help="after --: the engine's help command, run here")
    a = ap.parse_args(argv)
    if bool(a.help_file) == bool(a.command):
        ap.error("give either --help-file FILE or -- COMMAND")
    if a.help_file:
        try:
            text = a.help_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            print(f"engine_flags: cannot read {a.help_file}: {e}", file=sys.stderr)
            return 2
        source = a.help_file.name
    else:
        try:
            res = subprocess.run(a.command, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            print(f"engine_flags: cannot run {a.command[0]}: {e}", file=sys.stderr)
            return 2
        if res.returncode != 0:
            last = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
            print(f"engine_flags: `{' '.join(a.command)}` failed: {last}", file=sys.stderr)
            return 2
        text, source = res.stdout, " ".join(a.command)
    try:
        table = derive(a.engine, a.release, text, source)
        out = target(a.engine, a.release)
    except ValueError as e:
        print(f"engine_flags: {e}", file=sys.stderr)
        return 2
    if a.check:
        current = out.read_text(encoding="utf-8") if out.exists() else ""
        if current != table:
            print(f"engine_flags: {out.relative_to(REPO)} differs from what {source} gives", file=sys.stderr)
            return 1
        print(f"{out.relative_to(REPO)}: up to date")
        return 0
    tmp = out.with_suffix(".tmp")
    tmp.write_text(table, encoding="utf-8")
    tmp.replace(out)
    print(f"wrote {out.relative_to(REPO)} ({len(parse_help(text))} actions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
