"""Entry point of the host-side runtime (inside the zipapp, or ``python -m tunedeck.hostside``).

    python3 tunedeck-host-<hash>.pyz info          what will run here, as JSON
    python3 tunedeck-host-<hash>.pyz bench DIR     a benchmark job (DIR/spec.json)
    python3 tunedeck-host-<hash>.pyz ab DIR        an A/B campaign job
    python3 tunedeck-host-<hash>.pyz tune DIR      a tuning campaign job (resumes from DIR/state.json)
    python3 tunedeck-host-<hash>.pyz sample --home HOME …   the host's status as JSON lines
    python3 tunedeck-host-<hash>.pyz sim ENGINE …  a simulated engine (:mod:`tunedeck.sim.entry`)
    python3 tunedeck-host-<hash>.pyz smi …         nvidia-smi over the simulated GPUs

The archive's own ``__main__`` sends ``sim`` and ``smi`` to :mod:`tunedeck.sim.entry` (the runtime
and the simulator are sibling layers that do not import each other); the rest comes here.

Exit status: 0 done, 1 nothing completed / the A/B failed, 2 bad spec, 3 server not
ready, 4 disk (full) error, 5 another A/B holds the host, 130 stopped.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from tunedeck import __version__

MIN_PYTHON = (3, 9)


def _has_uvloop() -> bool:
    import importlib.util

    return importlib.util.find_spec("uvloop") is not None


def info() -> dict[str, object]:
    return {
        "runtime": __version__,
        "python": "%d.%d.%d" % sys.version_info[:3],
        "executable": sys.executable,
        "uvloop": _has_uvloop(),
        "archive": sys.argv[0],
    }


def _job_dir(text: str) -> Path:
    d = Path(text).resolve()
    if not d.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such job folder")
    return d


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["sample"]:
        # long-lived, threads only (no event loop): its own options and log lines
        from tunedeck.hostside import sampler

        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        return sampler.main(argv[1:])
    p = argparse.ArgumentParser(prog="tunedeck-host", description="tunedeck's host-side runtime")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="what will run here, as JSON")
    for name in ("bench", "ab", "tune"):
        sp = sub.add_parser(name, help=f"run a {name} job")
        sp.add_argument("job_dir", type=_job_dir)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.cmd == "info":
        print(json.dumps(info()))
        return 0
    from tunedeck.util import paths
    from tunedeck.util.aio import run_async

    # the job's own stop marker stays with this process: servers an A/B launches get their own
    os.environ.pop("TUNEDECK_RUN_ID", None)
    # everything the job writes (results, journal, run records) stays in its folder
    paths.use_home(args.job_dir)
    os.chdir(args.job_dir)
    if args.cmd == "bench":
        from tunedeck.hostside import benchjob

        return run_async(benchjob.run(args.job_dir))
    if args.cmd == "tune":
        from tunedeck.hostside import tunejob

        return run_async(tunejob.run(args.job_dir))
    from tunedeck.hostside import abjob

    return run_async(abjob.run(args.job_dir))


if __name__ == "__main__":
    raise SystemExit(main())
