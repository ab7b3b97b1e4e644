from __future__ import annotations

import logging
import os
import uuid
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from runs.models import Agent
from tests import factories, ordering, template_database

# Race tests hold up to fifty connections at once in one process, behind a barrier
# (tests/concurrency.py): the pool must have room for all of them, or they wait on each other for
# ever. A process of the product holds a few (DATABASE_POOL_SIZE); the spawned clusters keep that.
settings.DATABASES["default"]["OPTIONS"]["pool"]["max_size"] = 60

# Thousands of requests here are refused on purpose (the crawler, staff holding one permission,
# hostile values): Django logs each 4xx with its traceback, and formatting those was a tenth of the
# suite's time. A 5xx is still logged (django.request at ERROR); tests assert on answers, not logs.
logging.getLogger("django.request").setLevel(logging.ERROR)
logging.getLogger("django.security").setLevel(logging.CRITICAL)


@pytest.fixture(autouse=True)
def _fast_settings(settings: Any) -> None:
    # Retries in tests never sleep for real unless a test asks for it.
    settings.PROVIDER_BACKOFF_BASE_SECONDS = 0.001
    settings.PROVIDER_BACKOFF_CAP_SECONDS = 0.002
    # Users are created in almost every test; a slow password hash is a cost, not a safeguard, here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _open_provider_gates() -> None:
    # A 429 holds its provider's gate for the process (runs.providers.gate); a test's fake sleep
    # never waits it out, so each test starts with every provider open.
    from runs.providers.gate import forget_inherited_gates

    forget_inherited_gates()


@pytest.fixture(autouse=True)
def _fresh_alert_standings() -> None:
    # Each process remembers where an owner stands between charges (accounting.alerts); ids
    # repeat across tests (reset sequences), so each test starts with none remembered.
    from accounting.alerts import forget_standing

    forget_standing()


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    # The budget chart keeps past days in the cache; ids repeat across tests (reset sequences).
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def owner(db: None) -> User:
    return factories.make_user("olga", tz="Europe/Riga")


@pytest.fixture
def other_owner(db: None) -> User:
    return factories.make_user("mallory")


@pytest.fixture
def admin_user(db: None) -> User:
    user = factories.make_user("ada", staff=True, pin=True)
    user.is_superuser = True
    user.save(update_fields=["is_superuser"])
    return user


@pytest.fixture
def agent(db: None) -> Agent:
    return factories.make_agent("researcher", model="sim-research")


@pytest.fixture
def owner_client(owner: User) -> Client:
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings: None, django_db_blocker: Any, request: pytest.FixtureRequest
) -> None:
    """Each worker's test database is a copy of one migrated once for the run (tests/template_database.py),
    unless the databases are kept between runs (--reuse-db) or made without migrations."""
    option = request.config.getvalue
    if (option("reuse_db") and not option("create_db")) or option("nomigrations"):
        return
    with django_db_blocker.unblock():
        template_database.use_template()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Any:
    """pytest-django's test database, and at the end no session left on it before it is dropped: a
    thread's pooled connection, or a process a test spawned that outlived it, would otherwise keep
    the database (and, on a DATABASE_URL server, leave it there until the next run)."""
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    connection.close()


def pytest_sessionfinish(session: pytest.Session) -> None:
    # The controller (or a run without workers) stops the real model server its workers shared
    # (tests/real_model/conftest.py; it would stop by itself within a second anyway), and drops the
    # template their test databases were copied from.
    if not hasattr(session.config, "workerinput"):
        from tests.real_model.conftest import stop_server

        stop_server()
        template_database.drop_template()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations",
        action="store_true",
        help="write tests/durations.json (the slowest tests, which each worker starts with) at the end",
    )


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    if config.getoption("store_durations"):
        config.pluginmanager.register(ordering.DurationStore(), "store-durations")
    # The controller knows the test run's id as its workers do (pytest-xdist gives it only to them),
    # so that it finds, at the end, the model server and the template they shared.
    if hasattr(config.option, "testrunuid"):
        config.option.testrunuid = config.option.testrunuid or uuid.uuid4().hex
        os.environ["PYTEST_XDIST_TESTRUNUID"] = config.option.testrunuid


@pytest.hookimpl(trylast=True)  # after pytest-django's grouping of the database tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    ordering.modify_items(items)
