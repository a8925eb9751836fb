"""``tests/fault_injection.py`` (kill a writer, rewrite shards under a checkpoint, fill a small
disk) runs to the end with every fault ending as expected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "fault_injection.py"


def test_the_fault_injection_script_passes() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "[ok]   kill a writer",
        "[ok]   rewrite shards",
        "[ok]   fill a small disk",
    ]
    assert "changed since the state was saved" in lines[1] and "has no room" in lines[2]
