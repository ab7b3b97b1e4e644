"""manage.py with no database (config/database.py): a command that needs one says so in one line
within seconds, with what to do, and exits non-zero with no traceback; the same for a DATABASE_URL
whose server is down. Commands that need none still work. Real `python manage.py` processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config import embedded
from config.database import needs_database
from tests.database import database_url

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def manage(
    *args: str, database_url: str | None = None, **settings: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "APP_ENV")}
    environment.update(settings)
    if database_url is not None:
        environment["DATABASE_URL"] = database_url
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, time.monotonic() - started


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # nothing listens on it once the socket is closed


@pytest.fixture
def no_demo_server() -> None:
    if embedded.is_running():
        pytest.skip("`./dev run` is up in this checkout: its database answers")


def one_clear_line(done: subprocess.CompletedProcess[str], seconds: float) -> str:
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert seconds < 10
    assert "Traceback" not in output and "WARNING" not in output
    assert output.count("\n") == 1, output
    return output


COMMANDS_THAT_NEED_IT = [
    ("migrate",),
    ("createsuperuser", "--noinput", "--username", "someone"),
    ("shell", "-c", "print('hello')"),
    ("tick",),
    ("check", "--database", "default"),
]


@pytest.mark.parametrize("command", COMMANDS_THAT_NEED_IT, ids=" ".join)
def test_without_a_database_a_command_says_so_in_one_line(no_demo_server, command):
    output = one_clear_line(*manage(*command))
    assert output.startswith("No database is running")
    assert "./dev run" in output and f"./dev manage {command[0]}" in output and "DATABASE_URL" in output


def test_a_database_url_whose_server_is_down_is_one_line_naming_the_server_not_its_password():
    port = closed_port()
    output = one_clear_line(*manage("migrate", database_url=f"postgres://app:s3cret@127.0.0.1:{port}/app"))
    assert output.startswith(
        f"Cannot connect to the database of DATABASE_URL (127.0.0.1:{port}, database app)"
    )
    assert "Connection refused" in output and "s3cret" not in output


def test_in_production_a_server_that_is_down_is_one_line_too(monkeypatch):
    port = closed_port()
    monkeypatch.setenv("APP_ENV", "production")
    monkeypatch.setenv("SECRET_KEY", "k" * 20 + "abcdefghijklmnopqrstuvwxyz0123456789")
    monkeypatch.setenv("ALLOWED_HOSTS", "schedules.example.com")
    monkeypatch.setenv("SITE_URL", "https://schedules.example.com")
    done, seconds = manage("migrate", database_url=f"postgres://app@127.0.0.1:{port}/app")
    one_clear_line(done, seconds)


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (("check",), "System check identified no issues"),
        (("makemigrations", "--check", "--dry-run"), "No changes detected"),
        (("help",), "Available subcommands"),
        (("migrate", "--help"), "usage: manage.py migrate"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else "",
)
def test_commands_that_need_no_database_work_without_one_and_do_not_wait_for_it(
    no_demo_server, command, says
):
    # A pool wait far longer than the command takes, even on a busy machine: it must never be waited.
    done, seconds = manage(*command, DATABASE_POOL_TIMEOUT_SECONDS="300")
    assert done.returncode == 0, done.stderr
    assert says in done.stdout and "Traceback" not in done.stderr
    assert seconds < 60


def test_with_a_database_that_answers_the_command_runs(db):
    done, _ = manage("showmigrations", "schedules", database_url=database_url())
    assert done.returncode == 0, done.stderr
    assert "[X] 0001_initial" in done.stdout


@pytest.mark.parametrize(
    ("argv", "needs"),
    [
        (["manage.py"], False),
        (["manage.py", "--version"], False),
        (["manage.py", "migrate", "--help"], False),
        (["manage.py", "check", "--deploy"], False),
        (["manage.py", "check", "--database", "default"], True),
        (["manage.py", "check", "--database=default"], True),
        (["manage.py", "makemigrations", "--check"], False),
        (["manage.py", "collectstatic", "--noinput"], False),
        (["manage.py", "migrate"], True),
        (["manage.py", "shell"], True),
        (["manage.py", "qcluster"], True),
        (["manage.py", "a_command_added_later"], True),
    ],
)
def test_which_commands_need_the_database(argv, needs):
    assert needs_database(argv) is needs
