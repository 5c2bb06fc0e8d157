"""LocalHost primitives and the deterministic stream_lines."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tunedeck.hostops.hosts import LineStream
from tunedeck.hostops.localhost import LocalHost

pytestmark = pytest.mark.timeout(30)


def _alive(pid: int) -> bool:
    try:
        st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return st not in ("Z", "X")


def _find(needle: str) -> list[int]:
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                cl = Path(f"/proc/{e}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if needle in cl and _alive(int(e)):
                out.append(int(e))
    return out


async def test_local_run_and_script() -> None:
    h = LocalHost()
    r = await h.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.exit_status, r.stdout, r.stderr) == (3, "out\n", "err\n")
    r = await h.run_script('echo "$1"', ["a b"])
    assert r.ok and r.stdout == "a b\n"


async def test_stream_lines_break_ends_the_process_at_once(tmp_path: Path) -> None:
    f = tmp_path / "follow.log"
    f.write_text("one\ntwo\nthree\n")
    h = LocalHost()
    lines = h.stream_lines(["tail", "-n", "+1", "-F", str(f)])
    assert isinstance(lines, LineStream)
    got = []
    async with lines:
        async for line in lines:
            got.append(line)
            if line == "two":
                break
    assert got == ["one", "two"]
    # closed deterministically on leaving `async with`, not at garbage collection
    assert _find(str(f)) == []


async def test_stream_lines_to_the_end_without_newline(tmp_path: Path) -> None:
    h = LocalHost()
    async with h.stream_lines(["printf", "a\\nb\\nlast"]) as lines:
        assert [ln async for ln in lines] == ["a", "b", "last"]
    assert lines.exit_status == 0


async def test_stream_lines_exception_inside_closes(tmp_path: Path) -> None:
    f = tmp_path / "follow2.log"
    f.write_text("x\n")
    h = LocalHost()
    with pytest.raises(RuntimeError):
        async with h.stream_lines(["tail", "-F", str(f)]) as lines:
            async for _ in lines:
                raise RuntimeError("boom")
    await asyncio.sleep(0)
    assert _find(str(f)) == []
