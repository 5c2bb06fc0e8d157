"""Hostile profiles and malformed TOML files, and a harness that runs the profile commands on
them in-process and checks what reaches the terminal.

Used by ``tests/unit/test_hardening_fuzz.py`` (a seeded subset) and ``scripts/fuzz_profiles.py`` (the
full 1,000 hostile profiles + 400 malformed files). Deterministic for a given seed.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

#: What a terminal acts on; no command may print one raw (newline ends lines, tab is text).
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

PAYLOADS = [
    "\x1b]0;PWNED\x07\x1b[2J",  # retitle the window, clear the screen
    "\x1b[31mred\x1b[0m",
    "\x1b[1A\x1b[2K",  # cursor up, erase line: hides the previous line
    "\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\",  # OSC 8 hyperlink
    "\x9b2J",  # 8-bit CSI
    "a\nb",
    "line\r\noverwritten\rX",
    "\u202egnp.exe",  # right-to-left override
    "\u2028sep",
    "bell\x07",
    "nul\x00byte",
    "del\x7f",
    "tab\there",
    "$(touch /tmp/tunedeck-canary)",
    "`touch /tmp/tunedeck-canary`",
    "; rm -rf ~",
    "'\"\\",
    "%s%n{0}",
    "x" * 300,
    "--api-key=leak",
    "é日本🙂",
]

CANARY = Path("/tmp/tunedeck-canary")


def _tq(s: str) -> str:
    """A TOML basic string for ``s`` (control characters as \\uXXXX escapes)."""
    out = []
    for c in s:
        if c in '"\\' or ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def hostile_profile(rng: random.Random, i: int) -> str:
    """A profile file with hostile text in one or more places (keys, values, names, headers)."""
    p = lambda: rng.choice(PAYLOADS)
    name = f"h{i}" if rng.random() < 0.7 else p()
    engine = rng.choice(["vllm", "sglang", "vllm", p()])
    lines = [
        f"name = {_tq(name)}",
        f"engine = {_tq(engine)}",
        f"model = {_tq(rng.choice(['m/x', p()]))}",
        f"tp = {rng.choice(['1', '8', _tq(p())])}",
    ]
    if rng.random() < 0.3:
        lines.append(f"extra_args = {_tq(p())}")
    if rng.random() < 0.3:
        lines.append(f"notes = {_tq(p())}")
    if rng.random() < 0.2:
        lines.append(f"{_tq(p())} = 1")  # unknown top-level key
    lines.append("[flags]")
    for _ in range(rng.randint(0, 3)):
        k = rng.choice(["max-num-seqs", "api-key", "dtype", p()])
        lines.append(f"{_tq(k)} = {rng.choice([_tq(p()), '8', 'true'])}")
    lines.append("[env]")
    for _ in range(rng.randint(0, 3)):
        k = rng.choice(["HF_TOKEN", "NCCL_DEBUG", p()])
        lines.append(f"{_tq(k)} = {_tq(rng.choice(['x', p()]))}")
    if rng.random() < 0.3:
        lines.append("[nccl]")
        lines.append(f"preset = {_tq(rng.choice(['default', p()]))}")
        lines.append("[nccl.overrides]")
        lines.append(f"{_tq(rng.choice(['NCCL_X', p()]))} = {_tq(p())}")
    if rng.random() < 0.2:
        lines.append(f"[{_tq(p())}]")
        lines.append(f"{_tq(p())} = {_tq(p())}")
    if rng.random() < 0.2:
        lines.append("[attention]")
        lines.append(f"backend = {_tq(rng.choice(['flashinfer', p()]))}")
    return "\n".join(lines) + "\n"


def malformed_file(rng: random.Random, i: int) -> bytes:
    """A file that does not parse (or barely does): many shapes of broken."""
    base = hostile_profile(rng, i).encode("utf-8")
    kind = i % 10
    if kind == 0:  # nested arrays, deep
        n = rng.choice([65, 200, 500, 1000, 5000])
        return b"x = " + b"[" * n + b"]" * n + b"\n"
    if kind == 1:  # nested inline tables, deep
        n = rng.choice([65, 300, 1000, 3000])
        return b"[flags]\ny = " + b"{a = " * n + b"1" + b"}" * n + b"\n"
    if kind == 2:  # truncated
        return base[: rng.randint(1, max(1, len(base) - 1))]
    if kind == 3:  # invalid UTF-8
        pos = rng.randint(0, len(base))
        return base[:pos] + bytes([rng.choice([0xFF, 0xC0, 0x80, 0xFE])]) + base[pos:]
    if kind == 4:  # raw control characters (not escaped) in a key or value
        c = rng.choice([b"\x1b", b"\x07", b"\x00", b"\x9b", b"\r", b"\x7f"])
        return base.replace(b"[flags]", b'[flags]\n"k' + c + b'" = "v' + c + b'"', 1)
    if kind == 5:  # duplicate keys / tables
        return base + b"[flags]\n" + rng.choice([b"name = 1\n", b'"dup" = 1\n"dup" = 2\n'])
    if kind == 6:  # unterminated strings and brackets
        return base + rng.choice([b'x = "abc\n', b"x = [1, 2\n", b"[table\n", b"x = '''open\n", b"x = {a = 1\n"])
    if kind == 7:  # odd numbers and dates
        return base + rng.choice(
            [
                b"n = 1" + b"0" * 5000 + b"\n",
                b"d = 1979-13-45\n",
                b"f = 1e99999\n",
                b"t = 25:61:00\n",
                b"n = 0x\n",
                b"n = 1__0\n",
            ]
        )
    if kind == 8:  # random bytes
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 400)))
    # 9: structural nonsense
    return rng.choice(
        [
            b"\xef\xbb\xbfname = 1\n",
            b"= = =\n",
            b"[[flags]]\n[flags]\n",
            b"a.b = 1\na = 2\n",
            b"[a]\n[a.b]\n[a]\n",
            b"\x00" * 10,
            b"[" * 100 + b"\n",
        ]
    )


# ---------------------------------------------------------------------------- harness


@dataclass
class Tally:
    runs: int = 0
    tracebacks: int = 0
    injections: int = 0
    raw_controls: int = 0
    multi_line_errors: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, what: str, detail: str) -> None:
        if len(self.examples) < 10:
            self.examples.append(f"{what}: {detail[:300]!r}")

    @property
    def clean(self) -> bool:
        return not (self.tracebacks or self.injections or self.raw_controls or self.multi_line_errors)


def run_cli(argv: list[str]) -> tuple[int | None, str, str, str | None]:
    """``tunedeck ARGV`` in this process: (exit code, stdout, stderr, traceback or None)."""
    from tunedeck.cli import main

    out_b, err_b = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_b, encoding="utf-8", errors="backslashreplace", write_through=True)
    err = io.TextIOWrapper(err_b, encoding="utf-8", errors="backslashreplace", write_through=True)
    tb = None
    rc: int | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - exactly what this harness counts
            tb = traceback.format_exc()
    out.flush()
    err.flush()
    return rc, out_b.getvalue().decode("utf-8", "replace"), err_b.getvalue().decode("utf-8", "replace"), tb


def check(tally: Tally, argv: list[str], *, expect_error: bool) -> None:
    rc, out, err, tb = run_cli(argv)
    tally.runs += 1
    text = out + err
    if tb is not None or "Traceback (most recent call last)" in text:
        tally.tracebacks += 1
        tally.add("traceback", (tb or text)[-600:])
    if "\x1b" in text or "\x9b" in text or "\x07" in text:
        tally.injections += 1
        tally.add("injection", text)
    if RAW_CONTROL.search(text):
        tally.raw_controls += 1
        tally.add("raw control", text)
    if expect_error and rc not in (0, None):
        lines = [ln for ln in err.splitlines() if ln.strip()]
        if len(lines) != 1:
            tally.multi_line_errors += 1
            tally.add("multi-line error", err)
    # `profiles list` prints one line per broken file: each must start a new error
    for ln in err.splitlines():
        if ln.strip() and not (ln.startswith("tunedeck") or ln.startswith("note:")):
            tally.multi_line_errors += 1
            tally.add("error continuation line", ln)
            break


def fuzz(folder: Path, *, hostile: int, malformed: int, seed: int) -> Tally:
    """Write the files into ``folder`` (a profiles folder) and run the commands on them."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TUNEDECK_PROFILES"] = str(folder)
    tally = Tally()
    CANARY.unlink(missing_ok=True)
    names: list[tuple[str, Path]] = []
    for i in range(hostile):
        p = folder / f"h{i}.toml"
        p.write_text(hostile_profile(rng, i), encoding="utf-8")
        names.append((f"h{i}", p))
    for i in range(malformed):
        p = folder / f"m{i}.toml"
        p.write_bytes(malformed_file(rng, i))
        names.append((f"m{i}", p))
    old_limit = sys.getrecursionlimit()
    try:
        check(tally, ["profiles", "list"], expect_error=False)
        check(tally, ["profiles", "list", "--json"], expect_error=False)
        for name, path in names:
            check(tally, ["profiles", "show", name], expect_error=True)
            check(tally, ["profiles", "check", str(path)], expect_error=True)
            check(tally, ["profiles", "command", name], expect_error=True)
    finally:
        sys.setrecursionlimit(old_limit)
    if CANARY.exists():
        tally.injections += 1
        tally.add("canary", str(CANARY))
    return tally
