"""Only an explicit revision from an authorized client changes limits or the failure limit."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from schedules import services
from schedules.models import ScheduleRevision
from schedules.schemas import InvalidSchedule, parse_explicit
from tests.factories import limits, make_schedule

pytestmark = pytest.mark.django_db

NEW_LIMITS = limits(max_cost="8.00", synthesis_reserve_cost="1.50", synthesis_reserve_steps=2).to_json()


def test_an_explicit_revision_records_who_when_how_and_why(owner, agent, admin_user):
    schedule = make_schedule(owner, agent)
    body = {"limits": NEW_LIMITS, "max_consecutive_failures": 3, "reason": "Research runs need USD 8 now."}

    revision = services.pin_revision(schedule, parse_explicit(body), by=admin_user, via="admin")

    schedule.refresh_from_db()
    assert schedule.current_revision == revision
    assert revision.number == 2
    assert revision.path == ScheduleRevision.Path.EXPLICIT
    assert revision.via == "admin"
    assert revision.created_by == admin_user
    assert revision.reason == "Research runs need USD 8 now."
    assert revision.limits == NEW_LIMITS
    assert revision.max_consecutive_failures == 3
    assert revision.prompt == schedule.revisions.get(number=1).prompt


def test_earlier_revisions_are_unchanged_byte_for_byte(owner, agent, admin_user):
    schedule = make_schedule(owner, agent)
    before = list(ScheduleRevision.objects.filter(schedule=schedule).values())
    services.pin_revision(
        schedule,
        parse_explicit({"limits": NEW_LIMITS, "max_consecutive_failures": 3, "reason": "r"}),
        by=admin_user,
        via="api",
    )
    after = list(ScheduleRevision.objects.filter(schedule=schedule, number=1).values())
    assert after == before


def test_pinning_needs_the_pin_permission(owner, agent):
    schedule = make_schedule(owner, agent)
    with pytest.raises(PermissionDenied):
        services.pin_revision(
            schedule,
            parse_explicit({"limits": NEW_LIMITS, "max_consecutive_failures": 2, "reason": "r"}),
            by=owner,
            via="api",
        )
    assert schedule.revisions.count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"limits": NEW_LIMITS, "max_consecutive_failures": 2, "reason": "  "}, "reason"),
        ({"limits": NEW_LIMITS, "max_consecutive_failures": 2}, "reason"),
        ({"limits": NEW_LIMITS, "max_consecutive_failures": 0, "reason": "r"}, "max_consecutive_failures"),
        (
            {
                "limits": {**NEW_LIMITS, "synthesis_reserve_cost": "9.00"},
                "max_consecutive_failures": 2,
                "reason": "r",
            },
            "limits.synthesis_reserve_cost",
        ),
        ({"limits": {"max_cost": "8.00"}, "max_consecutive_failures": 2, "reason": "r"}, "limits.max_steps"),
    ],
)
def test_an_invalid_explicit_revision_names_the_field(body, field):
    with pytest.raises(InvalidSchedule) as caught:
        parse_explicit(body)
    assert field in caught.value.fields


def test_a_revision_cannot_be_updated_or_deleted(owner, agent):
    from accounting.models import AppendOnlyError

    revision = make_schedule(owner, agent).revision
    revision.reason = "rewritten"
    with pytest.raises(AppendOnlyError):
        revision.save()
    with pytest.raises(AppendOnlyError):
        ScheduleRevision.objects.filter(pk=revision.pk).update(reason="rewritten")
    with pytest.raises(AppendOnlyError):
        revision.delete()
    with pytest.raises(AppendOnlyError):
        ScheduleRevision.objects.filter(pk=revision.pk).delete()


def test_a_pin_reviewed_against_an_older_revision_is_refused(owner, agent, admin_user):
    schedule = make_schedule(owner, agent)
    body = parse_explicit({"limits": NEW_LIMITS, "max_consecutive_failures": 3, "reason": "r"})
    services.pin_revision(schedule, body, by=admin_user, via="admin", expected_number=1)
    with pytest.raises(services.RevisionChanged):
        services.pin_revision(schedule, body, by=admin_user, via="admin", expected_number=1)
    assert schedule.revisions.count() == 2
