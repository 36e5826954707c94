"""Run one `lilou` command in a fresh Python process and measure it (speed benchmarks).

A fresh process is what a user pays for: imports, checkpoint loading and the work.
The child reports its own peak RSS (VmHWM: ``ru_maxrss`` would carry the parent's
peak across fork and exec), so each run is measured alone.
"""
from __future__ import annotations

import compileall
import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

# What the `lilou` console script runs (lilou.cli.entry), with the peak written before the process leaves.
_CHILD = ("import sys\n"
          "from lilou.cli import leave, run_command\n"
          "status, quick = run_command(sys.argv[1:], quick_exit=True)\n"
          "peak = next(l for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
          "sys.stderr.write('PEAK_RSS_KB=' + peak.split()[1] + '\\n')\n"
          "leave(status, quick)\n")


def run_lilou(argv: list[str]) -> tuple[float, float, object]:
    """Wall seconds, peak RSS (MiB) and the parsed JSON output of ``lilou *argv`` in a fresh process."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"lilou {' '.join(argv)} failed: {result.stderr.strip()}")
    peak_kb = int(result.stderr.rsplit("PEAK_RSS_KB=", 1)[1].split()[0])
    return wall, peak_kb / 1024, json.loads(result.stdout)


@contextlib.contextmanager
def byte_compiled(package: Path) -> Iterator[None]:
    """``package`` byte-compiled while the block runs, as a pip install leaves it. With PYTHONDONTWRITEBYTECODE
    set (as on this project's machines) every fresh process would otherwise compile about 70 modules again
    (0.1 s); in that environment the bytecode is removed again at the end, so the source tree stays as it was."""
    compileall.compile_dir(package, quiet=1)
    try:
        yield
    finally:
        if sys.dont_write_bytecode:
            for cache in package.rglob("__pycache__"):
                shutil.rmtree(cache, ignore_errors=True)
