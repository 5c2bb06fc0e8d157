"""Crash-safe local files: atomic replace and append-only JSONL."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, TypeVar, Union

PathArg = Union[str, "os.PathLike[str]"]

_C = TypeVar("_C", bound="ClosedOnExit")


def os_error_text(e: OSError) -> str:
    """One line naming the path and the cause: ``/home/u/.tunedeck/lib: No space left on device``
    (not ``[Errno 28] No space left on device: '/home/u/.tunedeck/lib'``)."""
    if e.strerror and e.filename:
        return f"{os.fsdecode(e.filename)}: {e.strerror}"
    return e.strerror or str(e)


def atomic_write_bytes(path: PathArg, data: bytes, *, mode: int = 0o644, replace: bool = True) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a torn one.

    Temp file in the same directory → write → fsync → ``os.replace`` → fsync the directory.
    ``replace=False``: an existing ``path`` is left alone and :class:`FileExistsError` raised
    (the temp file is hard-linked into place, which fails when the name exists: no race).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            os.unlink(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def atomic_write_text(path: PathArg, text: str, *, mode: int = 0o644, replace: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode, replace=replace)


def atomic_write_json(path: PathArg, obj: Any, *, mode: int = 0o644) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n", mode=mode)


def remove_stale_temps(folder: PathArg) -> int:
    """Delete ``.*.tmp`` files a killed writer left behind. Returns how many."""
    n = 0
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    for p in folder.glob(".*.tmp"):
        try:
            p.unlink()
            n += 1
        except OSError:
            pass
    return n


def repair_jsonl_tail(path: PathArg) -> int:
    """Truncate a torn last line (no trailing newline). Returns bytes removed."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return 0
        # walk back to the last newline
        pos = size
        chunk = 65536
        while pos > 0:
            start = max(0, pos - chunk)
            f.seek(start)
            buf = f.read(pos - start)
            i = buf.rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                f.truncate(keep)
                f.flush()
                os.fsync(f.fileno())
                return size - keep
            pos = start
        f.truncate(0)
        f.flush()
        os.fsync(f.fileno())
        return size


class ClosedOnExit:
    """A writer that ``with`` closes at its end (:meth:`close`), whatever ended it."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class JsonlAppender(ClosedOnExit):
    """Append one JSON record per line with a single ``write()`` on an O_APPEND fd.

    The torn tail of a previous crash is repaired on open. ``fsync`` every
    ``sync_every`` records and on close.
    """

    def __init__(self, path: PathArg, *, sync_every: int = 32) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired = repair_jsonl_tail(self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pending = 0
        self._sync_every = sync_every

    def append(self, record: Any) -> None:
        line = json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"
        os.write(self._fd, line.encode("utf-8"))
        self._pending += 1
        if self._pending >= self._sync_every:
            self.sync()

    def sync(self) -> None:
        if self._fd >= 0 and self._pending:
            os.fsync(self._fd)
            self._pending = 0

    def close(self) -> None:
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = -1


def read_jsonl(path: PathArg) -> Iterator[Any]:
    """Yield each complete, parseable line; a torn or corrupt line is skipped."""
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            try:
                yield json.loads(raw)
            except ValueError:
                continue
