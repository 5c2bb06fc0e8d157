"""A fake ``nvidia-smi`` (POSIX sh) for collector and CLI tests.

``FakeSmi(tmp_path)`` writes the script into its own directory; put
``fake.path_env()`` in front of PATH (``LocalHost(env_overlay=...)`` or a
subprocess env). ``fake.set_mode(...)`` switches behaviour between calls:
``ok`` (default), ``na`` ([N/A] cells), ``exit9``/``exit12``/``exit14``/
``exit15``/``exit18``, ``hang`` (never answers the GPU query),
``lostloop`` (keeps running, prints only a 'GPU is lost' line), ``garbage`` (prints lines that are no
GPU rows). A file ``ignoreterm`` in its
directory makes it ignore SIGTERM in any mode (``hang`` + ``ignoreterm``: a wedged driver). Each call logs
``pid args`` to ``calls``; :meth:`alive_queries` counts running query processes.
"""

from __future__ import annotations

import os
from pathlib import Path

SCRIPT = r"""#!/bin/sh
d=$(dirname "$0")
mode=$(cat "$d/mode" 2>/dev/null || echo ok)
n=$(cat "$d/gpus" 2>/dev/null || echo 2)
echo "$$ $*" >> "$d/calls"
orig="$*"
# a file "ignoreterm" next to the script: TERM is ignored (a wedged nvidia-smi), whatever the mode
[ -f "$d/ignoreterm" ] && trap '' TERM
case "$mode" in
  exit9) echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."; exit 9;;
  exit12) echo "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA Display Driver is properly installed and present in your system."; exit 12;;
  exit14) echo "infoROM is corrupted at gpu 0000:18:00.0"; exit 14;;
  exit15) echo "Unable to determine the device handle for GPU0000:18:00.0: GPU is lost.  Reboot the system to recover this GPU"; exit 15;;
  exit18) echo "Failed to initialize NVML: Driver/library version mismatch"; echo "NVML library version: 580.173"; exit 18;;
esac
apps=0; loop=""
while [ $# -gt 0 ]; do
  case "$1" in
    --query-compute-apps=*) apps=1;;
    -lms) shift; loop=$1;;
    --loop-ms=*) loop=${1#--loop-ms=};;
  esac
  shift
done
if [ $apps = 1 ]; then
  [ "$mode" = hang ] && exec sleep 1000
  [ -f "$d/apps" ] && cat "$d/apps"
  exit 0
fi
[ "$mode" = hang ] && exec sleep 1000
if [ "$mode" = garbage ]; then
  # a wrapper or a future release printing what the query does not ask for (and an escape)
  while :; do printf 'GPU0: temp=40C \033]0;t\007util=12%%\n'; [ -z "$loop" ] && exit 0; sleep 0.2; done
fi
if [ "$mode" = lostloop ]; then
  # keeps running, prints only an error line per loop
  while :; do echo "Unable to determine the device handle for GPU0000:18:00.0: GPU is lost.  Reboot the system to recover this GPU"; sleep 0.2; done
fi
i=0
while :; do
  g=0
  while [ $g -lt $n ]; do
    if [ "$mode" = na ]; then
      echo "$g, GPU-fake-$g, NVIDIA Fake GPU, [N/A], 1024, 81559, 40, [N/A], [Not Supported], 1980, 2619"
    else
      echo "$g, GPU-fake-$g, NVIDIA Fake GPU, $(( (i * 10 + g) % 101 )), $(( 1000 + i )), 81559, 40, 123.45, 700.00, 1980, 2619"
    fi
    g=$((g + 1))
  done
  [ -z "$loop" ] && exit 0
  i=$((i + 1))
  sleep $(awk "BEGIN{print $loop/1000}")
  m=$(cat "$d/mode" 2>/dev/null || echo ok)
  [ "$m" = "$mode" ] || exec "$0" $orig
done
"""


class FakeSmi:
    def __init__(self, base: Path, gpus: int = 2) -> None:
        self.dir = base / "fake-smi-bin"
        self.dir.mkdir(parents=True, exist_ok=True)
        exe = self.dir / "nvidia-smi"
        exe.write_text(SCRIPT)
        exe.chmod(0o755)
        (self.dir / "gpus").write_text(str(gpus))
        self.set_mode("ok")

    def set_mode(self, mode: str) -> None:
        (self.dir / "mode").write_text(mode)

    def set_apps(self, text: str) -> None:
        (self.dir / "apps").write_text(text)

    def path_env(self) -> str:
        return f"{self.dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"

    def calls(self) -> list[tuple[int, str]]:
        f = self.dir / "calls"
        if not f.exists():
            return []
        out = []
        for line in f.read_text().splitlines():
            pid, _, args = line.partition(" ")
            out.append((int(pid), args))
        return out

    def _running(self, pid: int) -> bool:
        """``pid`` runs, and is still this fake (a pid recorded long ago may be another test's
        process now: pids wrap, at 32,768 on some machines)."""
        return _alive(pid) and str(self.dir).encode() in _cmdline(pid)

    def alive_queries(self) -> int:
        """How many --query-gpu processes started by this fake are alive now."""
        n = 0
        for pid, args in self.calls():
            if "--query-gpu" in args and self._running(pid):
                n += 1
        return n

    def kill_all(self) -> None:
        import signal

        for pid, _ in self.calls():
            if self._running(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
