"""Twenty writers on one schedule at once, with real threads on PostgreSQL: no 5xx, revision
numbers stay contiguous, and every change that applied has exactly one audit row. A writer that
waited applies on top of what the one before it committed, or gets a clear 409."""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection
from django.test import Client

from schedules.models import PauseEvent, Schedule, ScheduleRevision
from tests.api.conftest import Api, token_for, valid_pin_body
from tests.concurrency import race
from tests.factories import make_schedule, make_user

pytestmark = pytest.mark.django_db(transaction=True)
WRITERS = 20


@pytest.fixture
def schedule(owner, agent) -> Schedule:
    return make_schedule(owner, agent)


def statuses(results) -> Counter[int]:
    failures = [r for r in results if isinstance(r, Exception)]
    assert failures == []
    return Counter(r.status_code for r in results)


def contiguous_revisions(schedule: Schedule) -> list[int]:
    numbers = list(
        ScheduleRevision.objects.filter(schedule=schedule).order_by("number").values_list("number", flat=True)
    )
    assert numbers == list(range(1, len(numbers) + 1))
    schedule.refresh_from_db()
    assert schedule.current_revision.number == numbers[-1]
    return numbers


def test_twenty_concurrent_edits_all_apply_one_revision_each(owner, schedule):
    secret = token_for(owner, "read", "write")
    calls = [
        lambda i=i: Api(secret).patch(f"/schedules/{schedule.pk}", {"title": f"Briefing {i}"})
        for i in range(WRITERS)
    ]
    assert statuses(race(calls)) == {200: WRITERS}
    assert contiguous_revisions(schedule) == list(range(1, WRITERS + 2))
    titles = set(
        ScheduleRevision.objects.filter(schedule=schedule, number__gt=1).values_list("title", flat=True)
    )
    assert titles == {f"Briefing {i}" for i in range(WRITERS)}


def test_twenty_concurrent_pins_each_write_one_explicit_revision(admin_user, schedule):
    secret = token_for(admin_user)
    body = valid_pin_body()
    calls = [lambda: Api(secret).post(f"/schedules/{schedule.pk}/revisions", body)] * WRITERS
    assert statuses(race(calls)) == {201: WRITERS}
    assert contiguous_revisions(schedule) == list(range(1, WRITERS + 2))
    assert ScheduleRevision.objects.filter(schedule=schedule, path="explicit").count() == WRITERS


def test_pins_edits_pauses_and_resumes_racing_each_other(owner, admin_user, schedule):
    owner_secret, admin_secret = token_for(owner, "read", "write"), token_for(admin_user)
    path = f"/schedules/{schedule.pk}"
    calls = []
    for i in range(WRITERS // 4):
        calls += [
            lambda i=i: Api(owner_secret).patch(path, {"prompt": f"Sharper, take {i}."}),
            lambda: Api(admin_secret).post(f"{path}/revisions", valid_pin_body()),
            lambda: Api(owner_secret).post(f"{path}/pause"),
            lambda: Api(owner_secret).post(f"{path}/resume"),
        ]
    results = race(calls)
    codes = statuses(results)
    assert set(codes) <= {200, 201, 409}, codes
    applied_revisions = sum(
        1
        for r in results
        if r.status_code in (200, 201)
        and "/pause" not in r.request["PATH_INFO"]
        and "/resume" not in r.request["PATH_INFO"]
    )
    assert contiguous_revisions(schedule)[-1] == 1 + applied_revisions
    pauses = sum(1 for r in results if r.request["PATH_INFO"].endswith("/pause") and r.status_code == 200)
    resumes = sum(1 for r in results if r.request["PATH_INFO"].endswith("/resume") and r.status_code == 200)
    assert PauseEvent.objects.filter(schedule=schedule, action="pause").count() == pauses
    assert PauseEvent.objects.filter(schedule=schedule, action="resume").count() == resumes
    refused = [r.json()["error"]["code"] for r in results if r.status_code == 409]
    assert set(refused) <= {"not_active", "not_paused"}


def test_the_admin_pin_form_confirmed_by_twenty_admins_pins_once_and_sends_the_rest_back_to_review(schedule):
    admins = [make_user(f"pinner{i}", staff=True, pin=True) for i in range(WRITERS)]
    form = {
        "max_steps": "10",
        "synthesis_reserve_steps": "2",
        "max_model_calls": "10",
        "synthesis_reserve_model_calls": "2",
        "max_tool_calls": "6",
        "synthesis_reserve_tool_calls": "0",
        "max_cost": "7.00",
        "synthesis_reserve_cost": "1.00",
        "max_consecutive_failures": "3",
        "reason": "More budget for research.",
        "base_revision": "1",
        "confirm": "1",
    }

    def confirm(user):
        client = Client()
        client.force_login(user)
        response = client.post(f"/admin/schedules/schedule/{schedule.pk}/pin/", form)
        connection.close()
        return response

    codes = statuses(race([lambda u=u: confirm(u) for u in admins]))
    assert codes == {302: 1, 200: WRITERS - 1}  # one pinned; the others review the newer revision
    assert contiguous_revisions(schedule) == [1, 2]
