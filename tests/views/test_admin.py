"""The admin: pinning a revision (permission, field errors, diff, confirm), schedule filters and
columns, actions through the services, and changelists without a full COUNT(*)."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from schedules.models import PauseEvent, Schedule, ScheduleRevision
from tests.factories import fail, finish, make_schedule, make_user, materialize
from tests.views.conftest import overloaded

pytestmark = pytest.mark.django_db

LIMITS = {
    "max_steps": "10",
    "synthesis_reserve_steps": "2",
    "max_model_calls": "10",
    "synthesis_reserve_model_calls": "2",
    "max_tool_calls": "6",
    "synthesis_reserve_tool_calls": "0",
    "max_cost": "5.00",
    "synthesis_reserve_cost": "1.00",
}


def _text(page: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html.unescape(page)).split())


@pytest.fixture
def admin_client(admin_user: User) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.fixture
def schedule(owner, agent) -> Schedule:
    return make_schedule(owner, agent, title="Morning briefing")


def _pin(schedule: Schedule, **changes: str) -> dict[str, str]:
    return {**LIMITS, "max_consecutive_failures": "2", "reason": "", "base_revision": "1", **changes}


def test_the_pin_page_is_prefilled_from_the_revision_in_force(admin_client, schedule):
    response = admin_client.get(f"/admin/schedules/schedule/{schedule.pk}/pin/")
    assert response.status_code == 200
    page = response.text
    assert 'name="max_cost" value="5.00"' in page
    assert 'name="synthesis_reserve_steps" value="2"' in page
    assert 'name="max_consecutive_failures" value="2"' in page
    assert '<label for="id_reason" class="required">Reason</label>' in page


def test_the_change_page_links_to_the_pin_page_only_with_the_permission(admin_client, schedule):
    url = f"/admin/schedules/schedule/{schedule.pk}/change/"
    assert "Pin a revision" in admin_client.get(url).text
    staff = make_user("sam", staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_schedule", "change_schedule"]))
    client = Client()
    client.force_login(User.objects.get(pk=staff.pk))
    pin_url = f"/admin/schedules/schedule/{schedule.pk}/pin/"
    assert "Pin a revision" not in client.get(url).text
    assert client.get(pin_url).status_code == 403
    assert client.post(pin_url, _pin(schedule, reason="x", confirm="1")).status_code == 403
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 1


def test_owners_who_are_not_staff_cannot_reach_the_pin_page(owner_client, schedule):
    response = owner_client.get(f"/admin/schedules/schedule/{schedule.pk}/pin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_an_invalid_reserve_is_a_field_error_and_nothing_is_pinned(admin_client, schedule):
    data = _pin(schedule, synthesis_reserve_cost="6.00", reason="More headroom")
    response = admin_client.post(f"/admin/schedules/schedule/{schedule.pk}/pin/", data)
    text = _text(response.text)
    assert response.status_code == 200
    assert "Nothing was pinned" in text
    assert "synthesis_reserve_cost must be below max_cost (6.00 ≥ 5.00)" in text
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 1


def test_a_missing_reason_and_a_non_number_are_named(admin_client, schedule):
    data = _pin(schedule, max_steps="ten")
    text = _text(admin_client.post(f"/admin/schedules/schedule/{schedule.pk}/pin/", data).text)
    assert "max_steps must be a whole number" in text
    assert "reason is required" in text


def test_a_valid_revision_is_reviewed_as_a_diff_before_anything_is_written(admin_client, schedule):
    data = _pin(schedule, max_cost="8.00", max_consecutive_failures="3", reason="Longer reports")
    response = admin_client.post(f"/admin/schedules/schedule/{schedule.pk}/pin/", data)
    text = _text(response.text)
    assert "Review the change" in text
    assert "Max cost (USD) USD 5.00 USD 8.00" in text
    assert "Failure limit (failed runs in a row) 2 3" in text
    assert "Synthesis reserve — steps" not in text.split("Review the change", 1)[1].split("Reason:", 1)[0]
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 1


def test_confirming_pins_an_explicit_revision_with_who_and_why(admin_client, admin_user, schedule):
    data = _pin(schedule, max_cost="8.00", reason="Longer reports", confirm="Confirm")
    response = admin_client.post(f"/admin/schedules/schedule/{schedule.pk}/pin/", data, follow=True)
    assert response.redirect_chain[-1][0] == f"/admin/schedules/schedule/{schedule.pk}/change/"
    assert "Pinned revision 2 of “Morning briefing”." in html.unescape(response.text)
    revision = ScheduleRevision.objects.get(schedule=schedule, number=2)
    assert (revision.path, revision.via, revision.reason, revision.created_by_id) == (
        "explicit",
        "admin",
        "Longer reports",
        admin_user.pk,
    )
    assert revision.limits["max_cost"] == "8.00"
    assert ScheduleRevision.objects.get(schedule=schedule, number=1).limits["max_cost"] == "5.00"


def test_a_revision_pinned_meanwhile_sends_the_admin_back_to_the_review(admin_client, admin_user, schedule):
    first = _pin(schedule, max_cost="7.00", reason="First", confirm="Confirm")
    admin_client.post(f"/admin/schedules/schedule/{schedule.pk}/pin/", first)
    stale = _pin(schedule, max_cost="9.00", reason="Second", confirm="Confirm")  # reviewed against revision 1
    response = admin_client.post(f"/admin/schedules/schedule/{schedule.pk}/pin/", stale)
    assert "gained a new revision while you were reviewing" in response.text
    assert 'name="base_revision" value="2"' in response.text
    assert "USD 7.00" in response.text  # the diff is against the revision now in force
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 2
    admin_client.post(f"/admin/schedules/schedule/{schedule.pk}/pin/", {**stale, "base_revision": "2"})
    assert ScheduleRevision.objects.filter(schedule=schedule).latest("number").limits["max_cost"] == "9.00"


def test_the_schedule_list_filters_on_the_last_classification(admin_client, owner, agent):
    transient = make_schedule(owner, agent, title="Transient one")
    fail(materialize(transient), overloaded())
    budget = make_schedule(owner, agent, title="Budget one")
    fail(materialize(budget))
    fine = make_schedule(owner, agent, title="Fine one")
    finish(materialize(fine))
    base = "/admin/schedules/schedule/"
    by_class = _text(admin_client.get(base + "?last_error_class=ProviderTransientError").text)
    assert "Transient one" in by_class and "Budget one" not in by_class and "Fine one" not in by_class
    by_reason = _text(admin_client.get(base + "?last_failure_reason=budget_exhausted").text)
    assert "Budget one" in by_reason and "Transient one" not in by_reason
    by_provider = _text(admin_client.get(base + "?last_provider=anthropic").text)
    assert "Transient one" in by_provider and "Budget one" not in by_provider
    everything = _text(admin_client.get(base).text)
    assert "provider error transient · HTTP 529 · overloaded_error" in everything
    assert "Active 1 of 2 failures" in everything


def test_the_pause_reason_filter(admin_client, paused_after_two_failures, owner, agent):
    make_schedule(owner, agent, title="Still active")
    text = _text(admin_client.get("/admin/schedules/schedule/?pause_reason=failure_limit").text)
    assert "Morning briefing" in text and "Still active" not in text


def test_admin_actions_go_through_the_services_and_keep_the_count(admin_client, paused_after_two_failures):
    schedule = paused_after_two_failures
    response = admin_client.post(
        "/admin/schedules/schedule/", {"action": "resume", "_selected_action": [schedule.pk]}, follow=True
    )
    assert "Resumed 1 of 1 schedule(s)" in response.text
    schedule.refresh_from_db()
    assert schedule.status == "active" and schedule.consecutive_failures == 2
    assert PauseEvent.objects.filter(schedule=schedule, action="resume").count() == 1


@pytest.mark.parametrize(
    "url",
    [
        "/admin/runs/run/",
        "/admin/accounting/ledgerentry/",
        "/admin/accounting/accountingevent/",
        "/admin/schedules/occurrence/",
        "/admin/schedules/schedule/",
        "/admin/runs/conversation/",
        "/admin/schedules/schedulerevision/",
        "/admin/runs/run/?status=failed&error_class=ProviderTransientError&provider=anthropic",
        "/admin/schedules/revisionrequest/",
        "/admin/schedules/revisionrequest/?state=all",
    ],
)
def test_changelists_cost_a_fixed_number_of_queries_and_never_count_the_whole_table(
    admin_client, owner, agent, url, django_assert_max_num_queries
):
    from schedules import services
    from schedules.schemas import parse_revision_request
    from tests.factories import limits

    asked = {"limits": limits(max_cost="7.00").to_json(), "max_consecutive_failures": 2, "reason": "More."}
    for number in range(8):
        schedule = make_schedule(owner, agent, title=f"S{number}")
        for _ in range(3):
            fail(materialize(schedule), overloaded()) if number % 2 else finish(materialize(schedule))
        services.request_revision(schedule, parse_revision_request(asked), by=owner, via="test")
    with CaptureQueriesContext(connection) as queries, django_assert_max_num_queries(8):
        response = admin_client.get(url)
    assert response.status_code == 200
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper()]
    assert all("LIMIT" in sql.upper() for sql in counts), counts
    assert "SELECT DISTINCT" not in " ".join(q["sql"] for q in queries).upper()


def test_a_capped_changelist_says_more_than(admin_client, owner, agent, monkeypatch):
    from accounting.admin import BoundedCountPaginator

    monkeypatch.setattr(BoundedCountPaginator, "cap", 3)
    schedule = make_schedule(owner, agent)
    for _ in range(5):
        finish(materialize(schedule))
    text = _text(admin_client.get("/admin/runs/run/").text)
    assert "More than 3 runs: narrow the list with a filter or a search." in text


def test_the_admin_wears_the_products_header_and_colours(admin_client):
    page = admin_client.get("/admin/").text
    assert "Agent schedules · admin" in page
    assert '<link rel="stylesheet" href="/static/schedules/css/admin.css">' in page
    assert 'href="/"' in page  # back to the dashboard


def test_an_owner_time_zone_that_is_not_one_is_refused_in_the_admin(admin_client, owner):
    from accounting.models import OwnerBudget

    budget = OwnerBudget.objects.get(owner=owner)
    response = admin_client.post(
        f"/admin/accounting/ownerbudget/{budget.pk}/change/", {"owner": owner.pk, "timezone": "Mars/Olympus"}
    )
    assert response.status_code == 200
    assert "is not an IANA time zone" in html.unescape(response.text)
    budget.refresh_from_db()
    assert budget.timezone == "Europe/Riga"


def test_deleting_a_conversation_with_a_run_in_flight_in_the_admin_keeps_it_and_says_why(
    admin_client, schedule
):
    from runs.models import Conversation

    occurrence = materialize(schedule)  # its run is running
    conversation = Conversation.objects.get(runs__pk=occurrence.run_id)
    response = admin_client.post(
        f"/admin/runs/conversation/{conversation.pk}/delete/", {"post": "yes"}, follow=True
    )
    assert "has a run in flight and was kept" in html.unescape(response.text)
    assert Conversation.objects.filter(pk=conversation.pk).exists()


def test_a_stored_time_zone_that_is_not_one_falls_back_to_utc_instead_of_failing_pages(owner, owner_client):
    from accounting.models import OwnerBudget

    OwnerBudget.objects.filter(owner=owner).update(timezone="Mars/Olympus")  # as old data might hold
    assert owner_client.get("/").status_code == 200
    assert owner_client.get("/budget/").status_code == 200


def test_the_task_queue_cannot_be_edited_or_resubmitted_from_the_admin(admin_client):
    from django_q.models import OrmQ
    from django_q.models import Schedule as QueueSchedule

    from schedules.tasks import ensure_periodic_tasks

    ensure_periodic_tasks()
    tick = QueueSchedule.objects.get(name="schedules.tick")
    assert admin_client.get("/admin/django_q/schedule/").status_code == 200
    change = admin_client.post(f"/admin/django_q/schedule/{tick.pk}/change/", {"func": "os.system"})
    assert change.status_code == 403
    assert QueueSchedule.objects.get(pk=tick.pk).func == "schedules.tasks.tick"
    assert admin_client.get("/admin/django_q/success/").status_code == 404  # not registered at all
    assert not OrmQ.objects.exists()
