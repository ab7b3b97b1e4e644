"""The forecast's inputs (schedules.forecast.table) are kept current by every change that moves
them, in the change's transaction, and by the tick for time passing, so that they always equal a
recomputation from the schedules and their accounted runs (what `manage.py check_forecast` proves)."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor

from accounting.models import OwnerBudget
from runs.models import Run
from schedules import forecast, services
from schedules.execution import execute_occurrence, materialize_due
from schedules.forecast import table
from schedules.models import ForecastGroup, ForecastInput, ForecastState, Schedule
from schedules.schemas import parse_explicit, parse_update
from tests.concurrency import race
from tests.factories import finish, limits, make_agent, make_schedule, make_user, materialize, run_due

pytestmark = pytest.mark.django_db

DEC_10 = datetime(2026, 12, 10, 6, 0, tzinfo=UTC)  # 08:00 in Europe/Riga


def assert_current(owner_id: int) -> table.Table:
    stored = table.stored(owner_id)
    assert stored is not None
    assert table.expected(owner_id, day=stored.day, zone_name=stored.zone_name) == stored
    return stored


def pin(schedule: Schedule, by, **extra) -> None:
    body = {
        "limits": limits(max_cost=extra.pop("max_cost", "5.00")).to_json(),
        "max_consecutive_failures": 2,
        "reason": "New limits.",
        **extra,
    }
    services.pin_revision(schedule, parse_explicit(body), by=by, via="admin")


def complete_a_run(schedule: Schedule, cost: str) -> None:
    occurrence = materialize(schedule)
    Run.objects.filter(pk=occurrence.run_id).update(cost=Decimal(cost))
    finish(occurrence)


@time_machine.travel(DEC_10, tick=False)
def test_every_change_keeps_the_inputs_equal_to_a_recomputation(owner, agent, admin_user):
    first = make_schedule(owner, agent, title="A", cron="0 8 * * *")
    second = make_schedule(owner, agent, title="B", cron="0 8 * * *")
    third = make_schedule(owner, agent, title="C", cron="*/30 * * * *")
    stored = assert_current(owner.pk)
    # The two daily ones share a group: one cadence, one cost limit, no cap.
    assert sorted(row.members for row in stored.groups.values()) == [1, 2]

    services.pause_schedule(second, by=owner)
    assert sorted(row.members for row in assert_current(owner.pk).groups.values()) == [1, 1]
    services.resume_schedule(second, by=owner)
    assert_current(owner.pk)

    services.update_schedule(third, parse_update({"cron": "0 */2 * * *"}), by=owner, via="test")
    assert_current(owner.pk)
    pin(first, admin_user, monthly_cap="40.00")  # a capped schedule has a group of its own
    stored = assert_current(owner.pk)
    assert any(key.solo == first.pk for key in stored.groups)
    pin(first, admin_user, max_cost="2.50", monthly_cap=None)
    assert assert_current(owner.pk).inputs[first.pk][1] == Decimal("2.50")

    # Completed runs: the median cost of the last 20 is the cost per run.
    for cost in ("0.40", "0.60", "3.00"):
        complete_a_run(second, cost)
    assert assert_current(owner.pk).inputs[second.pk][1] == Decimal("0.60")
    complete_a_run(first, "4.00")  # above its new cost limit: a run never costs more than it
    assert assert_current(owner.pk).inputs[first.pk][1] == Decimal("2.50")

    once = make_schedule(owner, agent, title="Once", cron=None, run_at=DEC_10 + timedelta(hours=3))
    assert once.pk in assert_current(owner.pk).inputs
    run_due(once)  # the real tick and occurrence task: its only run ends, the schedule completes
    once.refresh_from_db()
    assert once.status == "completed"
    assert assert_current(owner.pk).inputs.keys() == {first.pk, second.pk, third.pk}

    third.delete()
    assert assert_current(owner.pk).inputs.keys() == {first.pk, second.pk}
    call_command("check_forecast")


def test_a_schedule_paused_by_its_failures_leaves_the_forecast(owner, agent):
    from tests.factories import fail

    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    assert schedule.pk in assert_current(owner.pk).inputs
    fail(materialize(schedule))
    schedule.refresh_from_db()
    assert schedule.status == "paused"
    assert schedule.pk not in assert_current(owner.pk).inputs
    assert not ForecastGroup.objects.filter(owner=owner).exists()  # an empty group goes


def test_the_tick_moves_the_owner_on_to_a_new_day_and_the_pages_read_around_it(owner, agent):
    with time_machine.travel(datetime(2026, 12, 10, 20, 0, tzinfo=UTC), tick=False):  # 22:00 in Riga
        make_schedule(owner, agent, cron="30 * * * *")
    after_midnight = datetime(2026, 12, 10, 22, 10, tzinfo=UTC)  # 00:10 on Dec 11
    with time_machine.travel(after_midnight, tick=False):
        before = forecast.month_forecast(owner.pk)  # the rows are still Dec 10's: read around them
        assert ForecastState.objects.get(owner=owner).day == date(2026, 12, 10)
        materialize_due(enqueue=lambda ids: None, now=after_midnight)
        assert ForecastState.objects.get(owner=owner).day == date(2026, 12, 11)
        assert forecast.month_forecast(owner.pk) == before
    assert_current(owner.pk)
    # 24 runs a day of USD 5: the daily ceiling (USD 25) admits 5; from 00:30 on Dec 11 to the 31st.
    assert before.runs.due == 21 * 24 and before.runs.run <= 5 * 21


def test_a_new_month_and_a_new_zone_are_the_ticks_too(owner, agent):
    with time_machine.travel(DEC_10, tick=False):
        make_schedule(owner, agent, cron="0 8 * * *")
    new_year = datetime(2027, 1, 1, 0, 5, tzinfo=UTC)
    materialize_due(enqueue=lambda ids: None, now=new_year)
    stored = assert_current(owner.pk)
    assert stored.day == date(2027, 1, 1) and len(next(iter(stored.groups.values())).fires) == 31

    OwnerBudget.objects.filter(owner=owner).update(timezone="America/New_York")
    materialize_due(enqueue=lambda ids: None, now=new_year)
    stored = assert_current(owner.pk)
    assert (stored.zone_name, stored.day) == ("America/New_York", date(2026, 12, 31))


def test_check_forecast_finds_rows_that_differ_and_repairs_them(owner, agent, capsys):
    schedule = make_schedule(owner, agent)
    call_command("check_forecast")
    assert (
        "Forecast inputs match a recomputation (1 owners, 1 groups, 1 schedules)." in capsys.readouterr().out
    )

    ForecastInput.objects.filter(schedule=schedule).update(per_fire=Decimal("0.01"))
    with pytest.raises(
        CommandError, match=r"differ from a recomputation for 1 owner\(s\) \(" + str(owner.pk)
    ):
        call_command("check_forecast")
    call_command("check_forecast", "--repair")
    assert_current(owner.pk)
    call_command("check_forecast", "--owner", str(owner.pk))


def test_schedules_written_around_the_services_are_found_by_the_check(owner, agent):
    other = make_user()
    schedule = make_schedule(other, agent)
    ForecastInput.objects.filter(schedule=schedule).delete()
    ForecastGroup.objects.filter(owner=other).delete()
    ForecastState.objects.filter(owner=other).delete()
    with pytest.raises(CommandError):
        call_command("check_forecast")
    call_command("check_forecast", "--repair")
    assert_current(other.pk)


@pytest.mark.django_db(transaction=True)
def test_one_owners_runs_completing_at_once_keep_the_inputs_exact(owner, agent, settings):
    settings.MAX_ACTIVE_SCHEDULES = 100
    schedules = [make_schedule(owner, agent, title=f"S{n}", cron="0 8 * * *") for n in range(12)]
    occurrences = [materialize(s) for s in schedules]
    for n, occurrence in enumerate(occurrences):
        Run.objects.filter(pk=occurrence.run_id).update(cost=Decimal("0.10") * (n + 1))

    results = race([lambda o=o: finish(o) for o in occurrences])

    assert all(isinstance(result, Run) for result in results), results
    stored = assert_current(owner.pk)
    assert sorted(cost for _, cost in stored.inputs.values()) == [
        Decimal("0.10") * (n + 1) for n in range(12)
    ]


@pytest.mark.django_db(transaction=True)
def test_a_fired_one_time_schedule_leaves_the_forecast_so_its_run_ends_under_the_owners_lock(owner, agent):
    slot = DEC_10 + timedelta(hours=3)
    with time_machine.travel(DEC_10, tick=False):
        once = make_schedule(owner, agent, title="Once", cron=None, run_at=slot)
        daily = make_schedule(owner, agent, title="Daily", cron="0 8 * * *")
        assert once.pk in assert_current(owner.pk).inputs
    fired_at = slot + timedelta(seconds=5)
    with time_machine.travel(fired_at, tick=False):
        coming = forecast.month_forecast(owner.pk)  # its only slot is behind it: none of its runs to come
        enqueued: list[int] = []
        materialize_due(enqueue=enqueued.extend, now=fired_at)
        once.refresh_from_db()
        assert (once.status, once.next_occurrence_at, len(enqueued)) == ("active", None, 1)
        # The tick took it out of the forecast as it fired it: the month's money did not move, and
        # it no longer counts among the schedules with runs left.
        assert assert_current(owner.pk).inputs.keys() == {daily.pk}
        after = forecast.month_forecast(owner.pk)
        assert (after.active, coming.active) == (1, 2)
        assert dataclasses.replace(after, active=coming.active) == coming

        # So its run's end, which completes it, has nothing to write there: it does not wait for
        # the owner's forecast row (a burst of one owner's one-time runs would end one at a time).
        held, release = threading.Event(), threading.Event()
        outlasted: list[bool] = []

        def hold_the_owners_forecast_row() -> None:
            try:
                with transaction.atomic():
                    ForecastState.objects.select_for_update().get(owner=owner)
                    held.set()
                    outlasted.append(not release.wait(timeout=15))
            finally:
                connection.close()

        holder = threading.Thread(target=hold_the_owners_forecast_row)
        holder.start()
        try:
            assert held.wait(timeout=10)
            run = execute_occurrence(enqueued[0], sleep=lambda s: None)
        finally:
            release.set()
            holder.join()
        assert outlasted == [False]  # the run ended while the row was still held
        assert run.status == "completed"
        once.refresh_from_db()
        assert once.status == "completed"
        assert assert_current(owner.pk).inputs.keys() == {daily.pk}
    call_command("check_forecast")


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_inputs_of_the_schedules_there_are():
    before = [("schedules", "0010_money_the_owner_sees_coming")]
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("schedules")
    owner = make_user("migrating-owner", tz="Europe/Riga")
    try:
        agent = make_agent("migrating-agent", model="sim-research")
        make_schedule(owner, agent, title="Daily", cron="0 8 * * *")
        make_schedule(owner, agent, title="Half-hourly", cron="*/30 * * * *")
        MigrationExecutor(connection).migrate(before)
        MigrationExecutor(connection).migrate(latest)
        assert len(assert_current(owner.pk).inputs) == 2
    finally:
        MigrationExecutor(connection).migrate(latest)
        Schedule.objects.filter(owner=owner).delete()
        User.objects.filter(pk=owner.pk).delete()
