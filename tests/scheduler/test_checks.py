"""Start-up checks: the task queue's delivery settings and the database role's row-lock grants."""

from __future__ import annotations

import uuid

import pytest
from django.core.management import call_command
from django.db import connection

from schedules.checks import check_row_lock_privileges, check_task_queue
from tests.database import database_url
from tests.scheduler.conftest import read_log


@pytest.mark.parametrize(
    ("change", "error_id"),
    [
        ({"catch_up": True}, "schedules.E001"),
        ({"max_attempts": 0}, "schedules.E002"),
        ({"timeout": 60}, "schedules.E003"),
        ({"retry": 10}, "schedules.E004"),
        ({"orm": None}, "schedules.E005"),
    ],
)
def test_a_task_queue_that_could_run_an_occurrence_twice_is_refused(settings, change, error_id):
    assert check_task_queue(None) == []
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, **change}
    assert error_id in [error.id for error in check_task_queue(None)]


def test_a_database_without_a_connection_pool_is_refused(monkeypatch):
    from django.conf import settings

    assert "schedules.E006" not in [error.id for error in check_task_queue(None)]
    options = {key: value for key, value in settings.DATABASES["default"]["OPTIONS"].items() if key != "pool"}
    monkeypatch.setitem(settings.DATABASES["default"], "OPTIONS", options)
    assert "schedules.E006" in [error.id for error in check_task_queue(None)]


def _limited_role() -> str:
    role = f"limited_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE ROLE "{role}" LOGIN')
        cursor.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        cursor.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
    return role


def _checked_as(role: str) -> list:
    with connection.cursor() as cursor:
        cursor.execute(f'SET ROLE "{role}"')
        try:
            return check_row_lock_privileges(None)
        finally:
            cursor.execute("RESET ROLE")


@pytest.mark.django_db
def test_a_role_that_cannot_lock_rows_is_named_with_the_missing_grant():
    role = _limited_role()
    errors = _checked_as(role)
    messages = [f"{e.msg} {e.hint}" for e in errors]
    assert any(
        "cannot lock rows of schedules_schedule" in m and f"GRANT UPDATE ON schedules_schedule TO {role}" in m
        for m in messages
    )
    assert {e.id for e in errors} == {"schedules.E010"}

    call_command("db_grants", "--role", role, "--for", "scheduler", "--apply", verbosity=0)
    assert _checked_as(role) == []


@pytest.mark.django_db
def test_db_grants_prints_least_privilege_and_keeps_the_ledger_append_only(capsys):
    call_command("db_grants", "--role", "schedules_web", "--for", "web")
    printed = capsys.readouterr().out
    assert 'GRANT SELECT, INSERT ON accounting_ledgerentry TO "schedules_web";' in printed
    assert 'GRANT SELECT, INSERT ON accounting_accountingevent TO "schedules_web";' in printed
    assert (
        "GRANT SELECT, INSERT, UPDATE ON schedules_schedule" not in printed
    )  # the web deletes schedules too
    call_command("db_grants", "--role", "sched", "--for", "scheduler")
    printed = capsys.readouterr().out
    assert 'GRANT SELECT, INSERT, UPDATE ON schedules_occurrence TO "sched";' in printed
    assert "UPDATE ON accounting_ledgerentry" not in printed


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_cluster_started_with_a_role_that_cannot_lock_rows_refuses_to_start(spawn, process_env):
    role = _limited_role()
    try:
        cluster = spawn("qcluster", env={"DATABASE_URL": database_url(user=role)})
        assert cluster.wait(timeout=60) != 0
        log = read_log(cluster)
        assert "cannot lock rows of schedules_schedule" in log
        assert f"GRANT UPDATE ON schedules_schedule TO {role}" in log
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP OWNED BY "{role}"')
            cursor.execute(f'DROP ROLE "{role}"')
