from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.database import database_url

ROOT = Path(__file__).resolve().parents[2]


def wait_for(condition: Callable[[], Any], *, timeout: float = 60, interval: float = 0.2) -> Any:
    """Poll the database (or anything) until `condition()` is truthy; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {condition.__doc__ or condition}")


@pytest.fixture
def process_env() -> dict[str, str]:
    """Environment for a child `manage.py` process on the test database: DEBUG off, as in
    production (on, Django would wrap every statement of the cluster to keep a log of it)."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "APP_ENV": "development",
        "DEBUG": "false",
        "Q_WORKERS": "2",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


@pytest.fixture
def spawn(process_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start `manage.py <args>` in its own process group; every one is killed at teardown."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        log = open(tmp_path / f"{args[0]}-{len(started)}.log", "w")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**process_env, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        process.log_path = log.name  # type: ignore[attr-defined]
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def read_log(process: subprocess.Popen[str]) -> str:
    return Path(process.log_path).read_text()  # type: ignore[attr-defined]
