"""System checks that stop start-up before a misconfiguration fails a real run."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.db import DatabaseError, connections

from schedules.grants import missing_lock_privileges


@register()
def check_task_queue(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """django-q2 must deliver each occurrence task at most once and never cut a run short."""
    conf = getattr(settings, "Q_CLUSTER", {})
    errors: list[CheckMessage] = []
    longest_run = settings.LONGEST_RUN_SECONDS
    timeout = conf.get("timeout") or 0
    retry = conf.get("retry") or 0
    if conf.get("catch_up", True):
        errors.append(
            Error("Q_CLUSTER['catch_up'] must be False: missed ticks must not replay.", id="schedules.E001")
        )
    if conf.get("max_attempts") != 1:
        errors.append(
            Error(
                "Q_CLUSTER['max_attempts'] must be 1: the occurrence claim is the idempotency.",
                id="schedules.E002",
            )
        )
    if timeout <= longest_run:
        errors.append(
            Error(
                f"Q_CLUSTER['timeout'] ({timeout} s) must exceed the longest allowed run ({longest_run} s).",
                id="schedules.E003",
            )
        )
    if retry <= timeout:
        errors.append(
            Error(
                f"Q_CLUSTER['retry'] ({retry} s) must exceed Q_CLUSTER['timeout'] ({timeout} s) "
                "plus time in the queue.",
                id="schedules.E004",
            )
        )
    if conf.get("orm") is None:
        errors.append(Error("Q_CLUSTER must use the ORM broker ('orm': 'default').", id="schedules.E005"))
    pool = (settings.DATABASES["default"].get("OPTIONS") or {}).get("pool")
    if not pool:
        errors.append(
            Error(
                "DATABASES['default'] must pool its connections (OPTIONS['pool']): a worker's runs in "
                "flight share a few connections instead of holding one each (docs/decisions/"
                "0005-runs-in-flight.md).",
                id="schedules.E006",
            )
        )
    return errors


@register()
def check_row_lock_privileges(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """The connected PostgreSQL role must be able to lock the rows the scheduler locks
    (docs/contract.md#database-roles)."""
    connection = connections["default"]
    try:
        missing = missing_lock_privileges(connection)
    except DatabaseError:
        return []  # an unreachable database is reported by whatever needs it first
    return [
        Error(
            f"The database role {role!r} cannot lock rows of {table}: it lacks the UPDATE privilege.",
            hint=(
                f"GRANT UPDATE ON {table} TO {role}; "
                f"(or run: manage.py db_grants --role {role} --for scheduler --apply)"
            ),
            id="schedules.E010",
        )
        for role, table in missing
    ]
