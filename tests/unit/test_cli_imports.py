"""`prexid run` starts without the offline tools' heavy imports: matplotlib and river cost ~2 s of
start-up, and a replica that restarts or joins a group late is that much longer away."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from prexid.service.app import cli
cli.parser()
import prexid.service.sources.kafka, prexid.service.http.server
cli.build(cli.Settings())
print(sorted(m for m in ("matplotlib", "PIL", "river") if m in sys.modules))
"""


def test_the_run_command_imports_no_plotting_or_river() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
