"""Where tunedeck's own log goes: a rotating file in the state dir, and stderr with ``--verbose``.

The core logs with ``logging.getLogger(__name__)``; failures it handles are logged
here, never swallowed. ``tunedeck --verbose …`` also prints INFO and above on stderr.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys

from tunedeck.util.paths import state_dir

LOG_NAME = "tunedeck.log"
MAX_BYTES = 1 << 20
BACKUPS = 3
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup(*, verbose: bool = False) -> None:
    """Configure the root logger once per process (safe to call again)."""
    root = logging.getLogger()
    if getattr(root, "_tunedeck", False):
        return
    root.setLevel(logging.INFO)
    try:
        d = state_dir()
        d.mkdir(parents=True, exist_ok=True)
        fh = logging.handlers.RotatingFileHandler(
            d / LOG_NAME, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8"
        )
    except OSError as e:  # a read-only home must not stop the command; say so once
        print(f"tunedeck: not logging to {state_dir() / LOG_NAME}: {e.strerror or e}", file=sys.stderr)
    else:
        fh.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(fh)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.INFO if verbose else logging.CRITICAL + 1)
    err.setFormatter(logging.Formatter("tunedeck: %(levelname)s %(name)s: %(message)s"))
    root.addHandler(err)
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    root._tunedeck = True  # type: ignore[attr-defined]
