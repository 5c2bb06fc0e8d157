"""tunedeck.ab and its commands are core: importing them never loads Textual or rich."""

import subprocess
import sys


def test_ab_core_imports_no_ui():
    code = (
        "import sys\n"
        "import tunedeck.ab.plans, tunedeck.ab.compare, tunedeck.ab.render, tunedeck.ab.journal, tunedeck.ab.runner\n"
        "import tunedeck.hostside.abops, tunedeck.ab.results, tunedeck.ab.series\n"
        "import tunedeck.commands.ab, tunedeck.commands.compare, tunedeck.commands.journal, tunedeck.commands.plans\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich') or m.startswith('tunedeck.widgets')]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
