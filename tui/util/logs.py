"""Where tunedeck's own log goes: a rotating file in the state dir, and stderr with ``--verbose``.

The core logs with ``logging.getLogger(__name__)``; failures it handles are logged
here, never swallowed. ``tunedeck --verbose …`` also prints INFO and above on stderr.
"""

from __future__ import annotations

import logging
import sys

from tunedeck.util.paths import state_dir

LOG_NAME = "tunedeck.log"
MAX_BYTES = 1 << 20
BACKUPS = 3
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class StateDirFile(logging.Handler):
    """The rotating ``tunedeck.log`` in the state dir, opened at the first record.

    A process that logs nothing (the simulated ``nvidia-smi``, which a poller starts every second
    or two) never finds the state dir nor imports :mod:`logging.handlers`. A state dir that cannot
    be written to is said once on stderr, and the records meant for it are dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.file: logging.Handler | None = None
        self.failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.file is None and not self.failed:
            self.open()
        if self.file is not None:
            self.file.emit(record)

    def open(self) -> None:
        """Open the file now (once); a failure is said on stderr, once."""
        import logging.handlers

        d = state_dir()
        try:
            d.mkdir(parents=True, exist_ok=True)
            fh = logging.handlers.RotatingFileHandler(
                d / LOG_NAME, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8"
            )
        except OSError as e:  # a read-only home must not stop the command; say so once
            self.failed = True
            print(f"tunedeck: not logging to {d / LOG_NAME}: {e.strerror or e}", file=sys.stderr)
            return
        fh.setFormatter(self.formatter or logging.Formatter(FORMAT))
        self.file = fh

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        super().close()


def setup(*, verbose: bool = False, lazy: bool = False) -> None:
    """Configure the root logger once per process (safe to call again).

    The file is opened here, so a state dir that cannot be written is said before anything else
    runs (a dashboard's screen would swallow the line). ``lazy`` opens it at the first record: for
    the commands (a simulated ``nvidia-smi`` started every second or two, a ``bench``, a ``sim``),
    whose stderr stays theirs and which mostly log nothing."""
    root = logging.getLogger()
    if getattr(root, "_tunedeck", False):
        return
    root.setLevel(logging.INFO)
    fh = StateDirFile()
    fh.setFormatter(logging.Formatter(FORMAT))
    if not lazy:
        fh.open()
    root.addHandler(fh)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.INFO if verbose else logging.CRITICAL + 1)
    err.setFormatter(logging.Formatter("tunedeck: %(levelname)s %(name)s: %(message)s"))
    root.addHandler(err)
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    root._tunedeck = True  # type: ignore[attr-defined]
