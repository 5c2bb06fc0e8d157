"""tui.ab and its commands are core: importing them never loads Textual or rich."""

import subprocess
import sys


def test_ab_core_imports_no_ui():
    code = (
        "import sys\n"
        "import tui.ab.plans, tui.ab.compare, tui.ab.render, tui.ab.journal, tui.ab.runner\n"
        "import tui.hostside.abops, tui.ab.results, tui.ab.series\n"
        "import tui.commands.ab, tui.commands.compare, tui.commands.journal, tui.commands.plans\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich') or m.startswith('tunedeck.widgets')]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
