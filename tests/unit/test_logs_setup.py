"""tunedeck's own log: opened at the first record, said once when it cannot be written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def _python(code: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=60, check=False
    )


SETUP = "import logging, sys\nfrom tunedeck.util import logs\nlogs.setup(lazy=True)\n"


def test_a_process_that_logs_nothing_opens_no_file_and_imports_no_handlers(tmp_path: Path):
    r = _python(SETUP + "print('logging.handlers' in sys.modules)\n", tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False"]
    assert not (tmp_path / "tunedeck").exists()


def test_the_first_record_opens_the_file_and_every_record_lands_in_it(tmp_path: Path):
    code = SETUP + (
        "log = logging.getLogger('tunedeck.x')\nlog.info('first %d', 1)\nlog.warning('second')\nlogging.shutdown()\n"
    )
    r = _python(code, tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = (tmp_path / "tunedeck" / "tunedeck.log").read_text().splitlines()
    assert [ln.split(" ", 2)[2] for ln in lines] == ["INFO tunedeck.x: first 1", "WARNING tunedeck.x: second"]


def test_a_state_dir_that_cannot_be_made_is_said_once_and_the_process_goes_on(tmp_path: Path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    r = _python(SETUP + "for i in range(3): logging.getLogger('t').warning('w%d', i)\nprint('done')\n", blocked)
    assert r.returncode == 0 and r.stdout.split() == ["done"], r.stderr
    said = [ln for ln in r.stderr.splitlines() if ln.startswith("tunedeck: not logging to ")]
    assert len(said) == 1 and str(blocked / "tunedeck" / "tunedeck.log") in said[0], r.stderr
    assert r.stderr.count("\n") == 1, r.stderr


def test_an_eager_setup_opens_the_file_and_says_a_blocked_state_dir_before_anything_runs(tmp_path: Path):
    code = "import sys\nfrom tunedeck.util import logs\nlogs.setup()\nprint('after setup', file=sys.stderr)\n"
    r = _python(code, tmp_path)
    assert r.returncode == 0 and (tmp_path / "tunedeck" / "tunedeck.log").exists(), r.stderr
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    r = _python(code, blocked)
    lines = r.stderr.splitlines()
    assert r.returncode == 0 and len(lines) == 2, r.stderr
    assert lines[0].startswith("tunedeck: not logging to ") and lines[1] == "after setup"
