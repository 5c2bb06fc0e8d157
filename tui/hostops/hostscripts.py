"""The shell scripts that launch, list and stop detached things on a host, and that start and
kill a command streamed over SSH.

Each is POSIX sh (dash, bash and busybox sh are tested), takes its inputs as
arguments, never by string concatenation, and lives under ``${TUNEDECK_HOME}``
(default ``$HOME/.tunedeck``): a folder per run, benchmark or A/B.
"""

from __future__ import annotations

import secrets

from tunedeck.util.safety import UnsafeInput

#: the kinds of detached things with a folder each under ``${TUNEDECK_HOME}``: servers,
#: host-side benchmarks and host-side A/B campaigns
KINDS = ("runs", "bench", "ab", "tune")


def base_line(kind: str) -> str:
    """The script line that sets ``$base`` to the folder of ``kind`` under ``${TUNEDECK_HOME}``."""
    if kind not in KINDS:
        raise UnsafeInput(f"folder kind {kind!r}: expected one of {', '.join(KINDS)}")
    return f'base="${{TUNEDECK_HOME:-$HOME/.tunedeck}}/{kind}"\n'


RUNS_BASE = base_line("runs")

# $1 = run id, $2 = the GPUs it will use ("all", "none" or "0,1,…"; empty: no check), $3 = empty
# for a new folder, or, to start a job again in its own folder (a campaign resumes from the state
# it left there), "<pid> <starttime>" of the process the caller saw end there ("-": none known).
# Prints DIR <dir>, then PID <pid> <starttime> once the wrapper started; BUSY <run id> <pid> <gpus>
# (and nothing runs) when a live run in the folder uses any of those GPUs; ERR <one line> when it
# cannot (a write that fails names the file and the host's cause, and a new run's folder is
# removed: a full or read-only disk leaves no debris; a restarted job's folder is never removed).
#
# A restart checks, under the lock, that the folder's wrapper is still the one the caller saw end
# and that it has ended; otherwise it starts nothing and prints FOLLOW <pid> <starttime>: the
# process there now, to follow instead. Of two followers restarting one killed job at once, one
# starts it and the other follows that process. The ended process's log is kept: log -> log.1 ->
# log.2 -> log.3 (the oldest dropped), each its last 1 MiB.
#
# One launch at a time per folder: the lock (an atomic mkdir) is held from that check until the
# wrapper has started, so two launches at once cannot both pass it. Its file ``pid`` names the
# holder as PID-SECONDS (written whole: a rename). A lock whose holder is gone (killed) is taken
# over by exactly one waiter: the one whose ``mkdir "$lock/took.<holder>"`` succeeds, and only
# if the lock still names that holder afterwards (a waiter that saw a dead holder late may land
# its mkdir in a newer lock: that lock names another holder, and it goes back to waiting). No
# waiter removes a lock it does not hold, so no two remove one dead lock and both take it.
LAUNCH_SCRIPT = r"""set -u
rid="$1"
want="$2"
expect="${{3:-}}"
{base}umask 077
dir="$base/$rid"
start_cwd=$(pwd)
made=
# put FILE < content: write it or stop with one line naming it and the cause, removing the run folder
put() {{
  why=$(cat 2>&1 > "$1") && return 0
  case $1 in /*) echo "ERR cannot write $1: ${{why##*: }}" ;; *) echo "ERR cannot write $dir/$1: ${{why##*: }}" ;; esac
  [ -n "$made" ] && rm -rf -- "$dir"
  exit 3
}}
why=$(mkdir -p "$base" 2>&1) || {{ echo "ERR cannot create $base: ${{why##*: }}"; exit 3; }}
lock="$base/.launch.lock"
me="$$-$(date +%s)"
i=0
while ! why=$(mkdir "$lock" 2>&1); do
  case $why in *[Ee]xists*) ;; *) [ -d "$lock" ] || {{ echo "ERR cannot create $lock: ${{why##*: }}"; exit 3; }} ;; esac
  holder=$(cat "$lock/pid" 2>/dev/null || true)
  case $holder in *[!0-9-]*|-*) holder= ;; esac
  if [ -n "$holder" ] && ! kill -0 "${{holder%%-*}}" 2>/dev/null && mkdir "$lock/took.$holder" 2>/dev/null \
      && [ "$(cat "$lock/pid" 2>/dev/null || true)" = "$holder" ]; then
    break
  fi
  i=$((i+1))
  [ $i -lt 600 ] || {{ echo "ERR another launch has held $lock for 30 s (its shell: pid ${{holder%%-*}})"; exit 6; }}
  sleep 0.05
done
trap 'rm -rf "$lock"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
put "$lock/pid.$$" <<{d}
$me
{d}
mv -f "$lock/pid.$$" "$lock/pid"
shares() {{
  [ "$1" = none ] || [ "$2" = none ] && return 1
  [ "$1" = all ] || [ "$2" = all ] && return 0
  for g in $(printf '%s' "$1" | tr ',' ' '); do
    case ",$2," in *",$g,"*) return 0 ;; esac
  done
  return 1
}}
if [ -n "$expect" ]; then
  [ -f "$dir/run.sh" ] || {{ echo "ERR $dir is not a job folder (nothing to restart)"; exit 3; }}
  pid=$(cat "$dir/pid" 2>/dev/null || true)
  st=$(cat "$dir/starttime" 2>/dev/null || true)
  alive=
  if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then
    set -- $(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null)
    [ "${{20:-}}" = "$st" ] && [ "${{1:-}}" != Z ] && [ "${{1:-}}" != X ] && alive=1
  fi
  # another process started since the one the caller saw end, or that one still runs: follow it
  if [ -n "$pid" ] && {{ [ "$pid $st" != "$expect" ] || [ -n "$alive" ]; }}; then
    echo "DIR $dir"
    echo "FOLLOW $pid $st"
    exit 0
  fi
  rm -f -- "$dir/rc" "$dir/pid" "$dir/starttime"
  if [ -s "$dir/log" ]; then
    n=3
    while [ $n -gt 1 ]; do
      [ ! -f "$dir/log.$((n-1))" ] || mv -f -- "$dir/log.$((n-1))" "$dir/log.$n"
      n=$((n-1))
    done
    why=$(tail -c 1048576 -- "$dir/log" 2>&1 > "$dir/log.1") || {{ echo "ERR cannot write $dir/log.1: ${{why##*: }}"; exit 3; }}
  fi
fi
if [ -n "$want" ]; then
  for d in "$base"/*/; do
    [ -f "$d/run.sh" ] || continue
    d=${{d%/}}
    pid=$(cat "$d/pid" 2>/dev/null || true)
    st=$(cat "$d/starttime" 2>/dev/null || true)
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || continue
    set -- $(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null)
    [ "${{20:-}}" = "$st" ] && [ "${{1:-}}" != Z ] && [ "${{1:-}}" != X ] || continue
    theirs=$(cat "$d/gpus" 2>/dev/null || true)
    if shares "$want" "${{theirs:-all}}"; then echo "BUSY ${{d##*/}} $pid ${{theirs:-all}}"; exit 7; fi
  done
fi
why=$(mkdir -p "$dir" 2>&1) || {{ echo "ERR cannot create $dir: ${{why##*: }}"; exit 3; }}
[ -n "$expect" ] || made=1
cd "$dir" || exit 3
put cwd <<{d}
$start_cwd
{d}
put gpus <<{d}
${{want:-all}}
{d}
put run.sh <<'{d}'
cd "$(dirname -- "$0")" || exit 1
echo $$ > pid.tmp && mv pid.tmp pid
sed 's/.*) //' /proc/$$/stat | cut -d' ' -f20 > starttime.tmp && mv starttime.tmp starttime
trap true TERM
run_dir=$(pwd)
# the command (with any secret) lives in this shell only: its 0600 file is gone before it runs
. ./cmd.env; rm -f ./cmd.env
cd -- "$(cat cwd)" 2>/dev/null || cd -- "$HOME" 2>/dev/null || cd /
"$@" >> "$run_dir/log" 2>&1 < /dev/null
echo $? > "$run_dir/rc"
{d}
put cmd.env <<'{d}'
set -- {cmd}
{d}
put argv.json <<'{d}'
{argv_json}
{d}
put env.json <<'{d}'
{env_json}
{d}
put meta.json <<'{d}'
{meta_json}
{d}
{secrets}put log < /dev/null
echo "DIR $dir"
# setsid -f: the server in its own session, not a child of this shell; LocalHost and sshd give
# this shell only 0/1/2, so the server holds none of the caller's pipes. Without setsid -f
# (busybox, old util-linux): python3 forks, closes any other descriptor and detaches.
if setsid -f true >/dev/null 2>&1; then
  setsid -f sh "$dir/run.sh" >/dev/null 2>&1 < /dev/null
elif command -v python3 >/dev/null 2>&1; then
  python3 -c 'import os,sys
if os.fork() == 0:
    os.setsid()
    os.closerange(3, 65536)
    os.execvp("sh", ["sh", sys.argv[1]])' "$dir/run.sh" >/dev/null 2>&1 < /dev/null
else
  echo "ERR neither setsid -f nor python3 is available to detach the server"; exit 4
fi
i=0
while [ ! -s starttime ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
if [ -s starttime ]; then echo "PID $(cat pid) $(cat starttime)"; else echo "ERR the server wrapper did not start"; exit 5; fi
"""

LIST_SCRIPT = (
    RUNS_BASE
    + r"""[ -d "$base" ] || exit 0
for d in "$base"/*/; do
  [ -f "$d/run.sh" ] || continue
  d=${d%/}
  id=${d##*/}
  pid=$(cat "$d/pid" 2>/dev/null)
  st=$(cat "$d/starttime" 2>/dev/null)
  rc=$(cat "$d/rc" 2>/dev/null)
  alive=0
  if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then
    set -- $(sed 's/.*) //' "/proc/$pid/stat")
    # a zombie (Z) or dead (X) wrapper has ended, even before its parent reaps it
    [ "${20}" = "$st" ] && [ "$1" != Z ] && [ "$1" != X ] && alive=1
  fi
  size=$(wc -c < "$d/log" 2>/dev/null | tr -d ' ')
  meta=$(tr -d '\n\t' < "$d/meta.json" 2>/dev/null)
  [ -n "$meta" ] || meta='{}'
  printf 'RUN\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$pid" "$st" "$alive" "$rc" "${size:-0}" "$d" "$meta"
done
"""
)

# $1 run dir, $2 grace seconds, $3 run id.
STOP_SCRIPT = r"""dir="$1"; grace="$2"; rid="$3"
pid=$(cat "$dir/pid" 2>/dev/null)
want=$(cat "$dir/starttime" 2>/dev/null)
rm -f "$dir/cmd.env"
markers() {
  grep -lszx "TUNEDECK_RUN_ID=$rid" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -vx "$$"
}
group() {
  [ -n "$pid" ] || return 0
  if command -v ps >/dev/null 2>&1; then
    ps -e -o pid= -o pgid= -o stat= 2>/dev/null | awk -v g="$pid" '$2 == g && $3 !~ /^Z/ { print $1 }'
  else
    for s in /proc/[0-9]*/stat; do
      g=$(sed 's/.*) //' "$s" 2>/dev/null | cut -d' ' -f3)
      [ "$g" = "$pid" ] && { p=${s#/proc/}; echo "${p%/stat}"; }
    done
  fi
}
members() { { group; markers; } | sort -u; }
# kill -s SIG -- TARGETS (dash rejects kill -TERM -- -PGID: "Illegal number"); busybox sh
# rejects the '--' and gets kill -SIG TARGETS. A failure whose target still exists is reported.
sig() {
  sg=$1; shift
  e=$(kill -s "$sg" -- "$@" 2>&1) || e=$(kill -"$sg" "$@" 2>&1) || case $e in
    *[Nn]o\ such\ process*) ;; *) echo "WARN kill -s $sg -- $* failed: $e" | tr '\n' ' '; echo;; esac
}
# One read of the wrapper's stat gives its state and start time: with two reads, a wrapper that
# ended between them looked like a pid taken over by another process.
stat=
[ -n "$pid" ] && stat=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null)
set -- $stat
cur=${20:-}
# gone, or a zombie (Z) / dead (X) wrapper: it has ended, even before its parent reaps it
if [ -z "$stat" ] || [ "$1" = Z ] || [ "$1" = X ]; then
  if [ -f "$dir/rc" ]; then
    left=$(markers)
    if [ -n "$left" ]; then sig KILL $left; echo "PIDS $left"; fi
    echo "STATE EXITED $(cat "$dir/rc")"
  else
    echo "STATE STALE process $pid is gone and wrote no exit status"
  fi
  exit 0
fi
if [ "$cur" != "$want" ]; then
  echo "STATE STALE pid $pid now belongs to another process (start time $cur, recorded $want)"
  exit 0
fi
all=$(members)
echo "PIDS" $all
sig TERM "-$pid"
for p in $(markers); do sig TERM "$p"; done
end=$(( $(date +%s) + grace ))
left=$(members)
while [ -n "$left" ] && [ "$(date +%s)" -lt "$end" ]; do
  sleep 0.2
  left=$(members)
done
if [ -z "$left" ]; then echo "STATE STOPPED TERM"; exit 0; fi
sig KILL "-$pid"
sig KILL $left
i=0
while [ $i -lt 20 ]; do
  left=$(members)
  [ -z "$left" ] && break
  sleep 0.1; i=$((i+1))
done
if [ -z "$left" ]; then echo "STATE STOPPED KILL"; exit 0; fi
for p in $left; do
  echo "REMAIN $p $(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f1)"
done
echo "STATE STUCK"
"""


# ---------------------------------------------------------------- streamed commands (SshHost.stream)
#: Stream wrapper: print "PID STARTTIME" then become argv (same pid).
STREAM_WRAPPER = (
    "st=-; f() { set -- ${1##*) }; st=${20:--}; }; "
    'if read -r s 2>/dev/null < /proc/$$/stat; then f "$s"; fi; '
    'echo "$$ $st"; exec "$@"'
)

#: Follows a file from a byte offset under the liveness rule (:mod:`tunedeck.hostops.liveness`):
#: ``sh -c FOLLOW_SCRIPT sh FIRST_BYTE PATH BEAT DEAD``. Prints its pid, then the file's bytes
#: from ``FIRST_BYTE`` on (``tail -F``) on stdout, exactly; one ``.`` on stderr every ``BEAT``
#: seconds (the host side's heartbeat). Once stdin (the laptop's heartbeat, a newline every
#: ``BEAT`` seconds) closes or brings nothing for ``DEAD`` seconds, or it is signalled, it TERMs
#: its whole process group (the channel's: its tail, heartbeat loop and sleep) and exits, so
#: nothing it started outlives the laptop by more than ``DEAD`` seconds.
FOLLOW_SCRIPT = (  # one line: it travels as an argument, where a newline is refused
    'echo $$; tail -c +"$1" -F -- "$2" 2>/dev/null </dev/null & '
    '{ while kill -0 $! 2>/dev/null && printf . >&2; do sleep "$3"; done; } </dev/null >/dev/null & '
    "trap 'trap \"\" TERM; kill -s TERM 0 2>/dev/null; exit 0' HUP INT TERM; "
    'while [ "$(timeout "$4" dd bs=1 count=1 2>/dev/null | wc -c)" -eq 1 ]; do :; done; '
    'trap "" TERM; kill -s TERM 0 2>/dev/null; exit 0'
)

#: Guarded kill of a stream's process (and its process group): $1 pid, $2 start time or '-'.
#: Signals are sent as ``kill -s SIG -- -PGID``: dash (Debian's /bin/sh) rejects
#: ``kill -TERM -- -PGID`` ("Illegal number"), which would leave the group alive; busybox sh
#: rejects the ``--`` and gets ``kill -SIG -PGID`` instead. A failed kill
#: whose target still exists is reported on stderr and in the exit status (3), never discarded.
KILL_SCRIPT = r"""
pid=$1 st=$2 rc=0
case $pid in ''|*[!0-9]*) exit 2;; esac
if [ ! -r /proc/self/stat ]; then kill -s TERM "$pid" 2>/dev/null; exit 0; fi
read -r s 2>/dev/null < /proc/$pid/stat || exit 0
g() { set -- ${1##*) }; cur=${20}; pg=$3; }
g "$s"
if [ "$st" != "-" ] && [ "$cur" != "$st" ]; then exit 0; fi
case $pg in ''|*[!0-9]*|0|1) pg=;; *) [ "$pg" -eq "$$" ] && pg=;; esac
sig() {
  # busybox sh does not take '--' (it says "invalid number"): then its own form -SIG TARGET
  e=$(kill -s "$1" -- "$2" 2>&1) || e=$(kill -"$1" "$2" 2>&1) || case $e in
    *[Nn]o\ such\ process*) ;; *) echo "kill -s $1 -- $2 failed: $e" >&2; rc=3;; esac
}
alive() { read -r s 2>/dev/null < /proc/$1/stat || return 1; set -- ${s##*) }; [ "$1" != Z ] && [ "$1" != X ]; }
members() {
  for f in /proc/[0-9]*/stat; do
    read -r s 2>/dev/null < "$f" || continue
    set -- ${s##*) }
    [ "$3" = "$pg" ] && [ "$1" != Z ] && [ "$1" != X ] && return 0
  done
  return 1
}
sig TERM "$pid"
[ -n "$pg" ] && sig TERM "-$pg"
i=0
while alive "$pid" && [ $i -lt 150 ]; do sleep 0.02; i=$((i+1)); done
alive "$pid" && sig KILL "$pid"
if [ -n "$pg" ] && members; then
  sleep 0.1
  members && sig KILL "-$pg"
fi
exit $rc
"""


def delimiter(*texts: str) -> str:
    while True:
        d = f"TUNEDECK_EOF_{secrets.token_hex(8)}"
        if not any(d in t for t in texts):
            return d
