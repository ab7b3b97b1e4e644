"""The run loop's statements are planned once per connection (runs.steps.planned_once), while every
other statement keeps being planned for its own values (config/settings.py: force_custom_plan)."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from runs.steps import planned_once

STATEMENT = "SELECT %s::int + 1 AS next"


def _plans() -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) "
            "FROM pg_prepared_statements WHERE statement LIKE %s",
            ["SELECT $1::int + 1 AS next%"],
        )
        generic, custom = cursor.fetchone()
    return int(generic), int(custom)


def _mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        return str(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_the_loops_statement_gets_a_generic_plan_and_the_session_keeps_custom_ones() -> None:
    connection.ensure_connection()
    assert _mode() == "force_custom_plan"

    answers = [planned_once(STATEMENT, [n]) for n in range(12)]

    assert answers == [(n + 1,) for n in range(12)]
    generic, custom = _plans()
    # psycopg prepares it at its fifth run; PostgreSQL plans it for its values five times more, then
    # keeps one plan for all.
    assert generic >= 1 and custom <= 5
    assert _mode() == "force_custom_plan"  # SET LOCAL ended with each statement's transaction
    assert not connection.in_atomic_block and connection.get_autocommit()


@pytest.mark.django_db(transaction=True)
def test_inside_a_transaction_it_is_part_of_it_and_rolls_back_with_it() -> None:
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE planned_once_probe (n int)")

    def fails_after_the_statement() -> None:
        with transaction.atomic():
            planned_once("INSERT INTO planned_once_probe VALUES (%s) RETURNING n", [1])
            raise RuntimeError("the caller's transaction fails after the statement")

    with pytest.raises(RuntimeError):
        fails_after_the_statement()
    assert planned_once("SELECT count(*) FROM planned_once_probe", []) == (0,)
    assert _mode() == "force_custom_plan"


@pytest.mark.django_db(transaction=True)
def test_a_failing_statement_leaves_the_connection_usable_and_its_settings_as_they_were() -> None:
    with pytest.raises(DatabaseError):
        planned_once("SELECT 1 / %s::int", [0])
    assert planned_once(STATEMENT, [41]) == (42,)
    assert _mode() == "force_custom_plan"
