"""docs/decisions/0002, point 4: existing revisions keep their pinned values; schedule.update cannot
change limits or the failure limit, so an existing schedule adopts new values only through an explicit
revision from an authorized client, which governs occurrences materialized after it."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from runs.models import Run
from schedules import services
from schedules.models import Occurrence, ScheduleRevision
from schedules.schemas import LimitsNotUpdatable, parse_explicit, parse_update
from tests.factories import limits, make_agent, make_schedule, materialize, run_due

pytestmark = pytest.mark.django_db


def test_a_schedule_created_before_the_decision_keeps_its_usd_1_revision_through_updates(owner, admin_user):
    schedule = make_schedule(owner, make_agent())
    old = {**schedule.revision.limits, "max_cost": "1.00", "synthesis_reserve_cost": "0.00"}
    services.pin_revision(
        schedule,
        parse_explicit({"limits": old, "max_consecutive_failures": 1, "reason": "as it was"}),
        by=admin_user,
        via="test",
    )
    services.update_schedule(schedule, parse_update({"prompt": "A sharper prompt."}), by=owner, via="chat")
    schedule.refresh_from_db()
    assert schedule.revision.number == 3
    assert schedule.revision.limits == old
    assert schedule.revision.max_consecutive_failures == 1
    with pytest.raises(LimitsNotUpdatable):
        parse_update({"max_cost": "5.00"})


def test_only_an_authorized_explicit_revision_changes_limits(owner, admin_user):
    schedule = make_schedule(owner, make_agent())
    body = parse_explicit(
        {"limits": limits(max_cost="7.00").to_json(), "max_consecutive_failures": 3, "reason": "r"}
    )
    with pytest.raises(PermissionDenied):
        services.pin_revision(schedule, body, by=owner, via="api")
    revision = services.pin_revision(schedule, body, by=admin_user, via="api")
    assert revision.path == ScheduleRevision.Path.EXPLICIT


def test_a_new_revision_governs_later_occurrences_and_not_runs_already_materialized(owner, admin_user):
    schedule = make_schedule(owner, make_agent())
    in_flight = materialize(schedule)
    before = {r.pk: (r.limits, r.max_consecutive_failures) for r in ScheduleRevision.objects.all()}

    services.pin_revision(
        schedule,
        parse_explicit(
            {"limits": limits(max_cost="7.00").to_json(), "max_consecutive_failures": 3, "reason": "r"}
        ),
        by=admin_user,
        via="api",
    )

    assert Run.objects.get(pk=in_flight.run_id).limits["max_cost"] == "5.00"
    assert {
        r.pk: (r.limits, r.max_consecutive_failures) for r in ScheduleRevision.objects.filter(pk__in=before)
    } == before
    from runs.failures import Outcome
    from runs.services import finish_run

    run = Run.objects.get(pk=in_flight.run_id)
    finish_run(run, Outcome(status="completed"), attempt=run.attempt)
    later = run_due(schedule)
    assert later.limits["max_cost"] == "7.00"
    assert Occurrence.objects.get(run=later).revision.number == 2
