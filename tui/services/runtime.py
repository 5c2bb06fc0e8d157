"""The host-side runtime: packed into one zipapp, shipped once per version, never installed.

:func:`build` packs :mod:`tunedeck.hostside` and the core modules it imports (the
benchmark engine, the A/B orchestrator, the launcher and startup tracker, the
log parser) into ``tunedeck-host-<sha256[:16]>.pyz`` with the standard
library's :mod:`zipapp`. The build is reproducible (fixed timestamps, sorted
entries), so the name is a content hash.

:func:`ensure` makes it usable on a host in as few round trips as possible:
one script finds ``${TUNEDECK_HOME}`` and a Python >= 3.9 (the caller's choice
first, e.g. the profile's ``python``, then ``python3`` on PATH), and tells whether
the archive is already in ``${TUNEDECK_HOME}/lib/``; if not, it is uploaded (SFTP on
SSH hosts; ``cat`` over an exec channel where the sshd has no SFTP subsystem, see
:meth:`tunedeck.hostops.ssh.SshHost.put_file`) to a temporary name, its hash is checked on
the host, and it is renamed into place. Nothing is written outside ``${TUNEDECK_HOME}``.

The archive carries the simulator too: :func:`sim_argv` turns a ``--sim`` command
(``tunedeck-host sim ENGINE …``, see :func:`tunedeck.profiles.deploy.sim_executable`) into the
runtime's ``sim ENGINE …`` on the host, and :func:`ensure_sim` gives a host with no nvidia-smi
of its own the simulated one, ``${TUNEDECK_HOME}/sim/bin/nvidia-smi`` (the runtime's ``smi``
over ``${TUNEDECK_HOME}/sim``), as :attr:`~tunedeck.hostops.hosts.Host.nvidia_smi`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import shlex
import tempfile
import zipapp
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import tunedeck
from tunedeck.hostops.hosts import Host, HostError
from tunedeck.profiles.deploy import HOST_RUNTIME
from tunedeck.util.files import atomic_write_bytes, atomic_write_text, os_error_text
from tunedeck.util.paths import state_dir
from tunedeck.util.safety import check_text

log = logging.getLogger(__name__)

MIN_PYTHON = (3, 9)

#: what goes into the zipapp, relative to the ``tunedeck`` package's folder (tui/ in the repository)
#: and under ``tunedeck/`` in the archive; a folder means every ``.py`` file in it, a pattern
#: (``*``) the data files it matches (at least one).
#: tests/integration/test_hostside.py imports every module of the built archive under the oldest
#: Python available and checks the minimum version with vermin, so a missing or too-new module
#: fails there.
SHIPPED: tuple[str, ...] = (
    "__init__.py",
    "hostside/",  # bench, A/B and tuning jobs, the status sampler
    "bench/",
    "bench/workloads/",
    "ab/__init__.py",
    "ab/cancel.py",
    "ab/capacity.py",
    "ab/compare.py",
    "ab/confdiff.py",
    "ab/events.py",
    "ab/journal.py",
    "ab/ops.py",
    "ab/plan.py",
    "ab/render.py",
    "ab/report.py",
    "ab/runner.py",
    "ab/sides.py",
    "ab/tune.py",
    "ab/tuneresult.py",
    "ab/warnings.py",
    "logparse/",
    "engines.py",
    "engine_flags/",
    "engine_flags/*.txt",  # the releases' flag tables (data, read with pkgutil.get_data)
    "model.py",
    "fmt.py",
    "hostops/__init__.py",
    "hostops/gpuquery.py",
    "hostops/hostruns.py",
    "hostops/hosts.py",
    "hostops/hostscripts.py",
    "hostops/localhost.py",
    "hostops/launcher.py",
    "hostops/logfollow.py",
    "hostops/liveness.py",
    "hostops/reread.py",
    "hostops/runstop.py",
    "hostops/runstore.py",
    "hostops/startupeta.py",
    "hostops/startuplog.py",
    "hostops/startupstate.py",
    "hostops/tracker.py",
    # the simulator (`sim ENGINE …`, `smi …`): every module but the laptop's demo host
    "sim/",
    "util/__init__.py",
    "util/aio.py",
    "util/files.py",
    "util/http.py",
    "util/paths.py",
    "util/ports.py",
    "util/records.py",
    "util/retry.py",
    "util/safety.py",
)

#: the archive's own ``__main__``: readable by any Python, so an old one gets one clear line
_BOOT = """import sys
if sys.version_info < (3, 9):
    sys.stderr.write("tunedeck host runtime: Python %d.%d at %s is too old (3.9 or newer is needed)\\n"
                     % (sys.version_info[0], sys.version_info[1], sys.executable))
    sys.exit(70)
if sys.argv[1:2] in (["sim"], ["smi"]):
    from tunedeck.sim.entry import main  # the simulated engines and nvidia-smi
else:
    from tunedeck.hostside.__main__ import main
sys.exit(main())
"""

#: never shipped although their folder is: laptop-only (the import contracts say the same)
NOT_SHIPPED: frozenset[str] = frozenset({"sim/demo.py"})

_FIXED_MTIME = 315532800  # 1980-01-01, the oldest time a zip entry can hold


class RuntimeUnavailable(Exception):
    """The host cannot run the runtime (no usable Python, upload or hash check failed)."""


@dataclass(frozen=True)
class Payload:
    path: Path
    sha256: str

    @property
    def name(self) -> str:
        return f"tunedeck-host-{self.sha256[:16]}.pyz"


@dataclass(frozen=True)
class Runtime:
    """The runtime as it is on a host: where it lives and what runs it."""

    home: str  # ${TUNEDECK_HOME} on the host, absolute
    python: str  # absolute path of the interpreter
    python_version: str
    archive: str  # absolute path of the zipapp on the host
    uploaded: bool  # True when this call shipped it
    has_nvidia_smi: bool = False  # the host has an nvidia-smi of its own on PATH

    def argv(self, *args: str) -> list[str]:
        return [self.python, "-I", self.archive, *args]


#: the import package's name: the archive holds it as the wheel does, whatever folder it came from
ARCHIVE_PACKAGE = "tunedeck"


def source_files(root: Path | None = None) -> list[tuple[str, Path]]:
    """(archive name, file) for everything in :data:`SHIPPED`, sorted; ``root`` is the
    package's folder (the imported package's by default: tui/ in a checkout, ``tunedeck/`` installed)."""
    root = root or Path(tunedeck.__file__).resolve().parent
    out: dict[str, Path] = {}
    missing: list[str] = []
    for entry in SHIPPED:
        if entry.endswith("/") or "*" in entry:
            found = sorted(root.glob(entry + "*.py" if entry.endswith("/") else entry))
            if not found and "*" in entry:
                missing.append(f"{ARCHIVE_PACKAGE}/{entry}")
            for f in found:
                name = f.relative_to(root).as_posix()
                if name not in NOT_SHIPPED:
                    out[f"{ARCHIVE_PACKAGE}/{name}"] = f
        else:
            out[f"{ARCHIVE_PACKAGE}/{entry}"] = root / entry
    missing += [n for n, p in out.items() if not p.is_file()]
    if missing:
        raise RuntimeUnavailable(f"the host runtime cannot be built: missing {', '.join(missing)}")
    return sorted(out.items())


_built: Payload | None = None


#: how an archive is made of its files (entry times, compression): a change to :func:`build` that
#: gives other bytes for the same files bumps it, so no state folder keeps the old build
_BUILD_FORMAT = 1


def _sources_key(files: list[tuple[str, bytes]]) -> str:
    """What the archive is made of (names, contents, the boot script, the build's format), as one hash."""
    h = hashlib.sha256(f"{_BUILD_FORMAT}\0{_FIXED_MTIME}\0{_BOOT}".encode())
    for name, data in files:
        h.update(f"\0{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _known(dest_dir: Path, index: Path) -> Payload | None:
    """The archive an earlier build made of the same sources (``index`` holds its sha256), when it is
    still there whole; None otherwise (then it is built again)."""
    try:
        sha = index.read_text().strip()
        payload = Payload(dest_dir / f"tunedeck-host-{sha[:16]}.pyz", sha)
        ok = hashlib.sha256(payload.path.read_bytes()).hexdigest() == sha
    except (OSError, UnicodeDecodeError):
        return None  # no index, or the archive is gone: build it
    if not ok:
        log.warning("%s does not match its recorded sha256: building it again", payload.path)
        return None
    return payload


def build(dest_dir: Path | None = None) -> Payload:
    """Build (or reuse) the zipapp; the same sources always give the same bytes and name.

    A build is recorded in ``dest_dir`` by a hash of its sources, so the next process that needs the
    same archive (every ``bench``, ``ab``, ``tune`` and the dashboard ship it) finds it instead of
    zipping it again: about 5 ms to hash the sources and check the archive, against about 65 ms."""
    global _built
    if _built is not None and _built.path.is_file() and dest_dir is None:
        return _built
    dest_dir = dest_dir or (state_dir() / "lib")
    files = [(name, f.read_bytes()) for name, f in source_files()]
    index = dest_dir / f".sources-{_sources_key(files)[:32]}"
    payload = _known(dest_dir, index)
    if payload is None:
        with tempfile.TemporaryDirectory(prefix="tunedeck-pack-") as tmp:
            src = Path(tmp) / "src"
            for name, data in files:
                t = src / name
                t.parent.mkdir(parents=True, exist_ok=True)
                t.write_bytes(data)
            (src / "__main__.py").write_text(_BOOT)
            for p in sorted(src.rglob("*"), reverse=True):
                os.utime(p, (_FIXED_MTIME, _FIXED_MTIME))
            out = Path(tmp) / "runtime.pyz"
            zipapp.create_archive(src, out, interpreter=None, compressed=True)
            data = out.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        payload = Payload(dest_dir / f"tunedeck-host-{sha[:16]}.pyz", sha)
        if not (payload.path.is_file() and payload.path.read_bytes() == data):  # missing, or not whole
            try:
                atomic_write_bytes(payload.path, data)
            except OSError as e:
                raise RuntimeUnavailable(f"the host runtime cannot be written: {os_error_text(e)}") from e
        try:  # the record only saves the next build: without it, that one zips again
            atomic_write_text(index, sha + "\n")
        except OSError as e:
            log.warning("the runtime's build is not recorded: %s", os_error_text(e))
    if dest_dir == state_dir() / "lib":
        _built = payload
    return payload


# $1 archive name, then the Python candidates. Prints HOME, then PY/NOPY/BADPY per candidate (PY: the
# command's path, its version and the path it runs itself by, sys.executable, when that runs alone),
# HAVE and SMI.
_FIND_SCRIPT = r"""set -u
name="$1"; shift
home="${TUNEDECK_HOME:-$HOME/.tunedeck}"
case "$home" in /*) ;; *) home="$(pwd)/$home" ;; esac
echo "HOME $home"
nl='
'
for py in "$@"; do
  exe=$(command -v -- "$py" 2>/dev/null) || { echo "NOPY $py"; continue; }
  out=$("$exe" -c 'import os, sys
e = sys.executable
print("%d.%d.%d" % tuple(sys.version_info[:3]))
print(e if e and os.path.isabs(e) and os.access(e, os.X_OK) else "")' 2>/dev/null) || { echo "BADPY $exe"; continue; }
  v=${out%%"$nl"*}
  case $out in *"$nl"*) self=${out#*"$nl"} ;; *) self= ;; esac
  # the path it names itself must run as it is (a wrapper may set what the interpreter needs)
  if [ -n "$self" ] && [ "$self" != "$exe" ] && ! "$self" -c '' >/dev/null 2>&1; then self=; fi
  echo "PY $exe $v $self"
done
[ -f "$home/lib/$name" ] && echo "HAVE"
command -v nvidia-smi >/dev/null 2>&1 && echo "SMI"
exit 0
"""

# $1 python, $2 staged file, $3 final file, $4 expected sha256
_PLACE_SCRIPT = r"""set -u
got=$("$1" -c 'import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""):
        h.update(b)
print(h.hexdigest())' "$2") || { echo "ERR cannot hash $2"; rm -f -- "$2"; exit 3; }
if [ "$got" != "$4" ]; then echo "ERR hash mismatch: got $got"; rm -f -- "$2"; exit 4; fi
mv -f -- "$2" "$3" && echo "OK"
"""


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


@dataclass(frozen=True)
class _Found:
    """What :data:`_FIND_SCRIPT` reported: ``${TUNEDECK_HOME}``, the first usable Python, what was
    tried before it, and whether this archive is already there."""

    home: str | None
    python: tuple[str, str] | None  # (path, version)
    tried: tuple[str, ...]
    shipped: bool
    smi: bool = False

    def problem(self) -> str:
        return (
            f"no Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]} to run tunedeck's host-side runtime "
            f"({'; '.join(self.tried) or 'none tried'}); install one, name it with --python, or run the "
            "client here with --client-where local"
        )


async def _find(host: Host, payload: Payload, python: str | None) -> _Found:
    """One round trip: the host's ``${TUNEDECK_HOME}``, a Python >= 3.9, and the archive's presence."""
    # a Python the operator named (--python, a profile's python) is the one used or the error;
    # it is never replaced by another silently
    candidates = [python] if python else ["python3"]
    for c in candidates:
        check_text(c, "python")
    target = getattr(host, "target", "local")
    r = await host.run_script(_FIND_SCRIPT, [payload.name, *dict.fromkeys(candidates)], timeout=60)
    if r.lost or r.timed_out:
        raise HostError(
            "connection-lost" if r.lost else "timeout",
            f"looking for Python on the host failed: {r.stderr.strip()}",
            target=target,
        )
    home = None
    tried: list[str] = []
    chosen: tuple[str, str] | None = None
    have = smi = False
    for line in r.stdout.splitlines():
        if line.startswith("HOME "):
            home = line[5:]
        elif line.startswith("PY ") and chosen is None:
            _, exe, said = line.split(" ", 2)
            ver, _, itself = said.strip().partition(" ")
            if _version_tuple(ver) >= MIN_PYTHON:
                # the default ``python3`` is run as the interpreter names itself (``sys.executable``):
                # a version manager's shim (pyenv, asdf) costs ~0.1 s a start and picks its version
                # per directory, so a job started elsewhere could get another Python than this one
                chosen = (itself if itself and python in (None, "python3") else exe, ver)
            else:
                tried.append(f"{exe} is Python {ver}")
        elif line.startswith("NOPY "):
            tried.append(f"{line[5:]}: not found")
        elif line.startswith("BADPY "):
            tried.append(f"{line[6:]}: does not run")
        elif line == "HAVE":
            have = True
        elif line == "SMI":
            smi = True
    if home is None:
        raise RuntimeUnavailable(f"{target}: the host's shell did not answer ({r.stderr.strip()[:200]})")
    return _Found(home, chosen, tuple(tried), have, smi)


async def ensure(host: Host, *, python: str | None = None) -> Runtime:
    """Make the runtime runnable on ``host``; raises :class:`RuntimeUnavailable` with one clear line."""
    payload = await asyncio.to_thread(build)  # the first in a process reads and may zip the sources
    target = getattr(host, "target", "local")
    found = await _find(host, payload, python)
    if found.python is None or found.home is None:
        raise RuntimeUnavailable(f"{target}: {found.problem()}")
    home = found.home
    exe, ver = found.python
    final = f"{home}/lib/{payload.name}"
    uploaded = False
    if not found.shipped:
        data = await asyncio.to_thread(payload.path.read_bytes)
        await _place(host, data, payload.sha256, final, exe, "the runtime")
        uploaded = True
        log.info("%s: runtime %s uploaded to %s", target, payload.name, final)
    return Runtime(
        home=home, python=exe, python_version=ver, archive=final, uploaded=uploaded, has_nvidia_smi=found.smi
    )


async def _place(host: Host, data: bytes, sha256: str, final: str, python: str, what: str) -> None:
    """Upload ``data`` next to ``final`` under a temporary name, check its hash there with the host's
    ``python``, and rename it into place (a half-written or corrupted file is never used)."""
    target = getattr(host, "target", "local")
    folder, name = final.rsplit("/", 1)
    staged = f"{folder}/.{name}.{os.getpid()}.tmp"
    try:
        await host.put_file(data, staged)
    except OSError as e:
        raise RuntimeUnavailable(f"{target}: uploading {what} failed: {os_error_text(e)}") from None
    r = await host.run_script(_PLACE_SCRIPT, [python, staged, final, sha256], timeout=60)
    if "OK" not in r.stdout.split():
        why = (r.stdout.strip() or r.stderr.strip() or "no answer").replace("ERR ", "")
        raise RuntimeUnavailable(f"{target}: placing {what} at {final} failed: {why}")


#: where uploaded data files live, relative to ``${TUNEDECK_HOME}``: ``data/<sha256>``
DATA_DIR = "data"

_HAVE_SCRIPT = r"""[ -f "$1" ] && echo HAVE
exit 0
"""


async def ensure_data(host: Host, data: bytes, *, python: str | None = None) -> str:
    """A data file (a benchmark's dataset or trace) on ``host`` at ``${TUNEDECK_HOME}/data/<sha256>``:
    uploaded once per content, hash-checked there like the runtime. Returns its path on the host."""
    rt = await ensure(host, python=python)
    sha = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())  # hashlib frees the GIL
    final = f"{rt.home}/{DATA_DIR}/{sha}"
    r = await host.run_script(_HAVE_SCRIPT, [final], timeout=30)
    if r.lost or r.timed_out:
        raise HostError(
            "connection-lost" if r.lost else "timeout",
            f"looking for {final} on the host failed: {r.stderr.strip()}",
            target=getattr(host, "target", "local"),
        )
    if "HAVE" not in r.stdout.split():
        await _place(host, data, sha, final, rt.python, f"the data file ({len(data)} bytes)")
        log.info("%s: data file %s uploaded", getattr(host, "target", "local"), final)
    return final


#: the simulated nvidia-smi, relative to ``${TUNEDECK_HOME}``
SIM_SMI = "sim/bin/nvidia-smi"

_SMI_SHIM = """#!/bin/sh
# nvidia-smi over tunedeck's simulated GPUs (${{TUNEDECK_HOME}}/sim), for --sim on this host
exec {python} -I {archive} smi "$@"
"""

# $1 staged shim, $2 its place
_PLACE_SHIM = r"""set -u
chmod 755 -- "$1" && mv -f -- "$1" "$2" && echo OK
"""


async def ensure_sim(host: Host, *, python: str | None = None) -> Runtime:
    """:func:`ensure`, for a ``--sim`` target: a host with no nvidia-smi of its own gets the
    simulated one (``${TUNEDECK_HOME}/sim/bin/nvidia-smi``) as its :attr:`~Host.nvidia_smi`, so
    every GPU query of tunedeck's (status, pre-flight, stop, the sampler, a benchmark's timeline)
    sees the GPUs the sim servers hold there."""
    rt = await ensure(host, python=python)
    if rt.has_nvidia_smi:
        return rt  # the host's own GPUs (a real nvidia-smi, or the demo host's)
    target = getattr(host, "target", "local")
    shim = f"{rt.home}/{SIM_SMI}"
    text = _SMI_SHIM.format(python=shlex.quote(rt.python), archive=shlex.quote(rt.archive))
    staged = f"{shim}.{os.getpid()}.tmp"
    try:
        await host.put_file(text.encode("utf-8"), staged, mode=0o755)
    except OSError as e:
        raise RuntimeUnavailable(f"{target}: writing the simulated nvidia-smi failed: {os_error_text(e)}") from None
    r = await host.run_script(_PLACE_SHIM, [staged, shim], timeout=30)
    if "OK" not in r.stdout.split():
        why = r.stderr.strip() or r.stdout.strip() or "no answer"
        raise RuntimeUnavailable(f"{target}: placing the simulated nvidia-smi at {shim} failed: {why}")
    host.nvidia_smi = shim
    return rt


async def sim_argv(host: Host, argv: Sequence[str], *, python: str | None = None) -> list[str]:
    """A ``--sim`` command as it runs on ``host``: ``tunedeck-host sim ENGINE …`` (what
    :func:`tunedeck.profiles.deploy.sim_executable` puts in plans and profiles' commands) becomes
    ``PYTHON -I ${TUNEDECK_HOME}/lib/tunedeck-host-<hash>.pyz sim ENGINE …``, the runtime ensured
    there with ``python`` first (the profile's). Any other command is returned as it is."""
    if not argv or argv[0] != HOST_RUNTIME:
        return list(argv)
    rt = await ensure_sim(host, python=python)
    return rt.argv(*argv[1:])


async def describe(host: Host, *, python: str | None = None) -> dict[str, object]:
    """For ``tunedeck probe``: which interpreter will run the host-side runtime (nothing is shipped)."""
    try:
        found = await _find(host, await asyncio.to_thread(build), python)
    except RuntimeUnavailable as e:
        return {"python": None, "python_version": None, "shipped": False, "problem": str(e)}
    exe, ver = found.python or (None, None)
    return {
        "python": exe,
        "python_version": ver,
        "shipped": found.shipped,
        "problem": None if found.python else found.problem(),
    }


def runtime_modules() -> list[str]:
    """Dotted module names in the archive (for the import check in the tests)."""
    out = []
    for name, _ in source_files():
        if not name.endswith(".py"):
            continue  # a data file
        mod = name[:-3].replace("/", ".")
        out.append(mod[: -len(".__init__")] if mod.endswith(".__init__") else mod)
    return out
