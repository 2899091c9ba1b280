"""Helpers of the tests that start xlpe processes: is a process still running, wait for a condition, and the
environment of a child ``python -m xlpe.cli`` that imports the xlpe under test."""

from __future__ import annotations

import os
import time
from pathlib import Path


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a zombie has ended; its new parent reaps it when it likes)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_for(cond, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def xlpe_env() -> dict:
    """The environment of a child ``python -m xlpe.cli`` that imports the xlpe this test imported."""
    import xlpe
    src = str(Path(xlpe.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
