"""Where one test run keeps what its pytest-xdist workers share (the real model server, the
template database): a directory per run, named by the run's id, which the controller also knows
(tests/conftest.py, `pytest_configure`) and clears at the end."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def run_dir(purpose: str) -> Path:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"solo-{os.getpid()}"
    return Path(tempfile.gettempdir()) / f"agent-schedules-{purpose}-{run}"
