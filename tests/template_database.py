"""One migrated database per test run, which every pytest-xdist worker's test database copies.

Left to pytest-django, each worker migrates its own test database from nothing: every migration,
once per worker, on two cores busy with the workers' collection (three workers took about 7 s of
both cores for it). Here the first worker to need a database migrates a template, under a file lock
the others wait on, and each worker's test database is created from it (`CREATE DATABASE ...
TEMPLATE`, Django's TEST["TEMPLATE"]); the migrate command then finds nothing left to apply. The
migrations still all run, once per test run, on a fresh database: nothing is taken from a run
before this one.

The controller drops the template at the end (tests/conftest.py, `pytest_sessionfinish`).
"""

from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from tests.run_state import run_dir


def state_dir() -> Path:
    return run_dir("template")


def template_name() -> str:
    return f"test_{settings.DATABASES['default']['NAME']}_template"


def use_template() -> None:
    """Build this run's template if no worker has yet, and have this worker's test database made
    from it. Before pytest-django creates the test database (its database access unblocked)."""
    state = state_dir()
    state.mkdir(exist_ok=True)
    name = template_name()
    with (state / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (state / "built").exists():
            _build(name)
            (state / "built").write_text(name)
    connection.settings_dict["TEST"]["TEMPLATE"] = name


def _build(name: str) -> None:
    quoted = connection.ops.quote_name(name)
    with connection._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")  # a run killed before its end
        cursor.execute(f"CREATE DATABASE {quoted}")
    own = connection.settings_dict["NAME"]
    _point_at(name)
    try:
        call_command("migrate", verbosity=0, interactive=False, run_syncdb=True)
    finally:
        _point_at(own)  # and no connection left open on the template: it could not be copied


def _point_at(name: str) -> None:
    connection.close()
    connection.close_pool()
    settings.DATABASES["default"]["NAME"] = connection.settings_dict["NAME"] = name


def drop_template() -> None:
    """The controller, at the end: drop the template if this run built one. (The controller's
    Django may not connect: pytest-django blocks it outside tests; psycopg is asked directly.)"""
    state = state_dir()
    # Unreadable, or the server gone: the next run's build drops a template left behind.
    with contextlib.suppress(OSError, psycopg.Error):
        name = (state / "built").read_text()
        db = settings.DATABASES["default"]
        server = {"host": db["HOST"], "port": db["PORT"], "user": db["USER"], "password": db["PASSWORD"]}
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as server_connection:
            quoted = connection.ops.quote_name(name)
            server_connection.execute(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")  # type: ignore[arg-type]
    for path in (state / "built", state / "lock"):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        state.rmdir()
