"""Input validation for anything that reaches a shell or a file name."""

from __future__ import annotations

import re
import shlex
from typing import Iterable, Mapping, Sequence

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: NUL, C0 controls but tab, DEL, C1 controls, line/paragraph separators, bidi overrides.
_CONTROL_RE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

#: Variables that change what gets executed; setting them needs explicit confirmation.
DANGEROUS_ENV = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "PATH",
        "BASH_ENV",
        "ENV",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONINSPECT",
    }
)

_SECRET_RE = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.IGNORECASE)


#: What a terminal may act on: C0 controls (tab and newline included), DEL, C1 controls (``\x9b``
#: is an 8-bit CSI), line/paragraph separators and bidirectional overrides.
_UNPRINTABLE_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\x1b": "\\x1b"}


def _escape_char(m: re.Match[str]) -> str:
    c = m.group()
    if c in _ESCAPES:
        return _ESCAPES[c]
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def visible(text: object) -> str:
    """``text`` made safe to show on a terminal, on one line.

    Every character a terminal could act on (ESC, BEL, CR, newline, C1 controls, bidi overrides)
    is replaced by a visible escape (``\\x1b``, ``\\n``, ``\\u202e``), so an untrusted key
    name, path or server message can neither move the cursor, retitle the window, clear the
    screen nor split one error into several lines. Printable text is unchanged.
    """
    s = text if isinstance(text, str) else str(text)
    return _UNPRINTABLE_RE.sub(_escape_char, s)


#: One escape sequence: a CSI (``ESC [`` or the 8-bit ``\x9b``, its parameters and final byte, or
#: cut short); an OSC, DCS, SOS, PM or APC string up to its BEL or ST; any other ``ESC x``.
_SEQUENCE_RE = re.compile(
    r"(?:\x1b\[|\x9b)(?P<params>[0-?]*)[ -/]*(?P<final>[@-~]?)"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])(?:[^\x07\x1b\x9c]|\x1b(?!\\))*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[ -/]*[0-~]?"
)
_SEQUENCE_START_RE = re.compile("[\x1b\x90-\x9f]")
_SGR_PARAMS_RE = re.compile(r"[0-9;:]*")


def _sequence(m: re.Match[str], sgr: bool) -> str:
    if sgr and m.group("final") == "m" and _SGR_PARAMS_RE.fullmatch(m.group("params") or ""):
        return m.group()
    return ""


def safe_line(text: object, *, sgr: bool = False) -> str:
    """One line of host text (a server log line, a process name, a metric label) made safe to
    show: every escape sequence is removed (OSC titles, DCS, cursor movement, clears, resets),
    except SGR colour codes when ``sgr`` is True (only where a terminal shows colour); then
    :func:`visible` writes any other character a terminal acts on (BEL, CR, lone controls, bidi
    overrides) as a visible escape. Tabs and printable text are unchanged.
    """
    s = text if isinstance(text, str) else str(text)
    if not _UNPRINTABLE_RE.search(s):
        return s  # the common case: one scan
    if _SEQUENCE_START_RE.search(s):
        s = _SEQUENCE_RE.sub(lambda m: _sequence(m, sgr), s)
        if not _UNPRINTABLE_RE.search(s):
            return s
    if sgr and "\x1b[" in s:
        # the kept SGR codes: only their ESC stays raw
        return "\x1b[".join("\t".join(visible(p) for p in part.split("\t")) for part in s.split("\x1b["))
    return "\t".join(visible(p) for p in s.split("\t"))


#: Characters JSON leaves raw (with ``ensure_ascii=False``) that a terminal still acts on.
_JSON_UNSAFE_RE = re.compile("[\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def terminal_json(text: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``) with DEL, C1 controls, line
    separators and bidi overrides written as ``\\uXXXX`` escapes: the same JSON value, safe to
    print. (json.dumps already escapes C0 controls; these only ever occur inside strings.)"""
    return _JSON_UNSAFE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class UnsafeInput(ValueError):
    """A value that must not reach a shell; the message names what and where."""


def check_text(value: str, where: str) -> str:
    """Reject NUL and control characters (tab is allowed)."""
    if not isinstance(value, str):
        raise UnsafeInput(f"{where}: expected text, got {type(value).__name__}")
    m = _CONTROL_RE.search(value)
    if m:
        raise UnsafeInput(f"{where}: contains a control character {m.group()!r} at position {m.start()}")
    return value


def check_env_name(name: str, where: str = "env") -> str:
    if not isinstance(name, str) or not ENV_NAME_RE.match(name):
        raise UnsafeInput(f"{where}: invalid environment variable name {name!r} (must match [A-Za-z_][A-Za-z0-9_]*)")
    return name


def check_env(env: Mapping[str, str], where: str = "env") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in env.items():
        check_env_name(k, where)
        out[k] = check_text(str(v), f"{where}.{k}")
    return out


def check_argv(argv: Sequence[str], where: str = "command") -> list[str]:
    if not argv:
        raise UnsafeInput(f"{where}: empty command")
    prog = argv[0]
    if isinstance(prog, str) and (prog.startswith("-") or "=" in prog):
        # `env K=V argv` and the shell would read it as an option or an assignment
        raise UnsafeInput(f"{where}[0]: program name {prog!r} must not start with '-' or contain '='")
    return [check_text(a, f"{where}[{i}]") for i, a in enumerate(argv)]


def dangerous_env_names(env: Iterable[str]) -> list[str]:
    return sorted(n for n in env if n in DANGEROUS_ENV)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_RE.search(name))


#: Flags whose value is a secret: --api-key, --hf-token and anything ending in -key, -token,
#: -secret or -password (also with '_', and the bare words).
_SECRET_FLAG_RE = re.compile(r"^--?(?:[A-Za-z0-9_-]*[-_])?(?:key|token|secret|password|passwd)$", re.IGNORECASE)
REDACTED = "<redacted>"


def is_secret_flag(flag: str) -> bool:
    """``--api-key``, ``--hf-token``, ``--db_password``… (the flag alone, without ``=value``)."""
    return bool(_SECRET_FLAG_RE.match(flag))


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in a command (``--api-key V`` or ``--api-key=V``; the last one wins,
    as argparse takes it), or None."""
    found: str | None = None
    args = [str(a) for a in argv]
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(flag + "="):
            found = a[len(flag) + 1 :]
    return found


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A copy of a command safe to store or show: the value of every secret-bearing flag
    (``--api-key=V``, ``--api-key V``) and of ``NAME=V`` words with a secret-looking NAME
    (``env HF_TOKEN=V …``) is replaced by ``<redacted>``. A flag may take several values (vLLM's
    ``--api-key K1 K2``): every word after it up to the next option is hidden, as argparse would
    give them all to the flag."""
    out: list[str] = []
    hiding = 0  # 1: a secret flag's value comes next; 2: more of its values may follow
    for a in argv:
        a = str(a)
        if hiding == 1 or (hiding == 2 and not a.startswith("-")):
            out.append(REDACTED)
            hiding = 2
            continue
        hiding = 0
        if a.startswith("-"):
            flag, eq, _ = a.partition("=")
            if is_secret_flag(flag):
                if eq:
                    out.append(f"{flag}={REDACTED}")
                else:
                    out.append(a)
                    hiding = 1
                continue
        else:
            name, eq, _ = a.partition("=")
            if eq and ENV_NAME_RE.match(name) and is_secret_name(name):
                out.append(f"{name}={REDACTED}")
                continue
        out.append(a)
    return out


_SECRET_WORD = r"(?:key|token|secret|password|passwd)"
#: A secret argument as an engine echoes it: ``--api-key V`` / ``--api-key=V`` (the flags
#: :func:`is_secret_flag` names), ``api_key='V'`` / ``api_key=V`` (SGLang's ``ServerArgs(...)``), ``'api_key':
#: ['V']`` (vLLM's "non-default args"), ``HF_TOKEN=V`` (a name :func:`is_secret_name` matches),
#: ``Bearer V``. The value: a ``[...]`` list, a quoted string or a bare word.
_SECRET_ARG_RE = re.compile(
    r"(?<![\w-])(?:"
    r"(?i:(?P<flag>--?(?:[A-Za-z0-9_-]*[-_])?" + _SECRET_WORD + r")(?:=|[ \t]+))"
    r"|(?i:(?P<q>['\"])(?:[A-Za-z0-9_]*_)?" + _SECRET_WORD + r"(?P=q)[ \t]*[:=][ \t]*)"
    r"|(?i:(?:[A-Za-z0-9_]*_)?" + _SECRET_WORD + r"=)"
    r"|[A-Z0-9_]*(?:TOKEN|KEY|SECRET|PASSWORD)[A-Z0-9_]*="
    r"|(?i:bearer[ \t]+)"
    r")(?P<value>\[[^\]]*\]?|'[^']*'?|\"[^\"]*\"?|[^\s,()\[\]{}'\"]+)"
)
_NOT_SECRET = frozenset({"None", "''", '""', "[]", "null", "none"})


def _redact_value(m: re.Match[str]) -> str:
    value = m.group("value")
    if value in _NOT_SECRET or value.startswith("-"):
        return m.group()  # no value, or the next flag
    head = m.group()[: m.start("value") - m.start()]
    if value[0] in "'\"[":
        close = {"[": "]"}.get(value[0], value[0])
        return f"{head}{value[0]}{REDACTED}{close}"
    return head + REDACTED


def redact_text(line: str) -> str:
    """``line`` (a server's log line) with the value of every secret argument it echoes
    replaced by ``<redacted>``: the engines print their arguments at start-up."""
    if _may_echo_secret(line.lower()):
        return _SECRET_ARG_RE.sub(_redact_value, line)
    return line


_HINT_WORDS = ("key", "token", "secret", "passw")
_FLAG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


def _may_echo_secret(low: str) -> bool:
    """A quick test (on the lower-cased line) that every line :data:`_SECRET_ARG_RE` changes
    passes, and that the engines' stat lines (``#new-token: 12``, ``token usage``, ``tokens/s``)
    do not: a secret word after ``_`` or a quote, or followed by ``…=``, or inside a flag that
    starts with a dash at a word's start (``--api-key``, not ``#cached-token``); or ``bearer``."""
    if "bearer" in low:
        return True
    n = len(low)
    for w in _HINT_WORDS:
        i = low.find(w)
        while i != -1:
            before = low[i - 1] if i else " "
            if before in "_'\"":
                return True
            j = i + len(w)
            while j < n and (low[j].isalnum() or low[j] == "_"):
                j += 1
            if j < n and low[j] == "=":
                return True
            if before == "-":
                k = i - 1
                while k > 0 and low[k - 1] in _FLAG_CHARS:
                    k -= 1
                if low[k] == "-" and (k == 0 or not (low[k - 1].isalnum() or low[k - 1] == "_")):
                    return True
            i = low.find(w, i + 1)
    return False


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy safe to store or show: secret-looking values are replaced."""
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


def env_argv(argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """``["env", "K=V", …, *argv]`` (just ``argv`` without env), every field checked."""
    argv = check_argv(argv)
    pairs = [f"{k}={v}" for k, v in check_env(env or {}).items()]
    return ["env", *pairs, *argv] if pairs else list(argv)


def env_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """``env K=V … argv`` as one shell-safe string (sshd drops SSH env requests)."""
    return shlex.join(env_argv(argv, env))
