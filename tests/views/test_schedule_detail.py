"""The schedule detail: why it paused in one sentence, limits, history, occurrences, events."""

from __future__ import annotations

import re
import zoneinfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import Run
from runs.services import delete_conversation
from schedules import services
from schedules.models import Occurrence, Schedule
from schedules.schemas import parse_explicit, parse_update
from tests.factories import finish, limits, make_budget_paused, make_schedule, materialize

pytestmark = pytest.mark.django_db


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_a_failure_limit_pause_leads_with_plain_words_then_the_identifiers(
    owner_client, paused_after_two_failures
):
    response = owner_client.get(f"/schedules/{paused_after_two_failures.pk}/")
    assert response.status_code == 200
    pause = paused_after_two_failures.pause
    local = pause.created_at.astimezone(zoneinfo.ZoneInfo("Europe/Riga"))
    day = f"{local.day} {local:%b}"
    panel = _text(response.text.split('<section id="status"', 1)[1].split("</section>", 1)[0])
    assert f"Paused on {day} at {local:%H:%M} {local.tzname()} after 2 consecutive failed runs." in panel
    # Newest first: what happened and whether it passes, then the codes in a quieter line.
    overloaded = f"{day}: The AI provider was overloaded — usually temporary."
    budget = f"{day}: The run used its whole USD 5.00 budget before answering."
    assert overloaded in panel and budget in panel and panel.index(overloaded) < panel.index(budget)
    assert "provider error · transient · HTTP 529 · overloaded_error · anthropic" in panel
    assert "budget exhausted (cost)" in panel
    assert '<p class="failure__ids">provider error · transient · HTTP 529' in response.text


def test_the_page_shows_limits_with_reserves_and_the_classified_events(
    owner_client, paused_after_two_failures
):
    text = _text(owner_client.get(f"/schedules/{paused_after_two_failures.pk}/").text)
    assert "Steps 10 2" in text and "Cost USD 5.00 USD 1.00" in text and "Tool calls 6 none" in text
    assert "Failure limit 2 failed runs in a row" in text
    assert "The AI provider was overloaded — usually temporary. provider error 529 overloaded_error" in text
    assert "budget exhausted (cost) · BudgetExhausted" not in text  # the classification, not the class name
    assert "2 of 2 failures" in text
    assert "secret plans" not in text  # the failure message stays on the run page


def test_events_of_runs_deleted_with_their_conversation_stay_and_say_so(
    owner_client, paused_after_two_failures
):
    schedule = paused_after_two_failures
    run = Run.objects.filter(conversation__metadata__schedule_id=schedule.pk).order_by("id").first()
    assert run is not None
    delete_conversation(run.conversation)
    text = _text(owner_client.get(f"/schedules/{schedule.pk}/").text)
    assert f"Run {run.pk} deleted with its conversation" in text
    assert "Deleted with its conversation" in text  # its occurrence, too
    # The pause is still explained from the content-free event: the dimension went with the run.
    assert "The run used its whole budget before answering." in text


def test_revision_history_is_dated_with_who_path_reason_and_a_diff(owner, owner_client, admin_user, agent):
    schedule = make_schedule(owner, agent, title="Briefing")
    services.update_schedule(schedule, parse_update({"title": "Daily briefing"}), by=owner, via="dashboard")
    schedule.refresh_from_db()
    explicit = parse_explicit(
        {
            "limits": limits(max_cost="8.00").to_json(),
            "max_consecutive_failures": 3,
            "reason": "Longer reports",
        }
    )
    services.pin_revision(schedule, explicit, by=admin_user, via="admin")
    text = _text(owner_client.get(f"/schedules/{schedule.pk}/").text)
    assert "by ada · explicit via admin" in text and "“Longer reports”" in text
    assert "max cost USD 5.00 → changed to USD 8.00" in text
    assert "max consecutive failures 2 → changed to 3" in text
    assert "synthesis reserve steps 2 → changed to 0" in text
    assert "title Briefing → changed to Daily briefing" in text
    assert "by olga · schedule.update via dashboard" in text
    assert text.index("Longer reports") < text.index("schedule.update via dashboard")  # newest first
    assert " v1" not in text and " v2" not in text


def test_the_occurrence_timeline_shows_outcome_cost_and_usage(owner, owner_client, agent):
    schedule = make_schedule(owner, agent)
    run = finish(materialize(schedule))
    Occurrence.objects.create(
        schedule=schedule,
        scheduled_for=run.created_at.replace(year=2020),
        revision=schedule.revision,
        outcome=Occurrence.Outcome.MISSED,
    )
    text = _text(owner_client.get(f"/schedules/{schedule.pk}/").text)
    assert "Completed" in text and f"Run {run.pk}" in text
    assert "0 steps · 0 model calls · 0 tool calls" in text
    assert "Missed Found after its grace window; not run, not counted." in text


def test_another_owners_schedule_is_404(other_client, paused_after_two_failures):
    assert other_client.get(f"/schedules/{paused_after_two_failures.pk}/").status_code == 404


def test_the_detail_page_costs_a_fixed_number_of_queries(
    owner, owner_client, agent, django_assert_max_num_queries
):
    schedule = make_schedule(owner, agent)
    for _ in range(25):
        finish(materialize(schedule))
    for number in range(5):
        services.update_schedule(
            schedule, parse_update({"title": f"Briefing {number}"}), by=owner, via="test"
        )
    # 12, the schedule's requests for new limits, and this month's spend and recent runs' median for
    # its forecast (the top bar's crossed thresholds come with the budget row).
    with django_assert_max_num_queries(15):
        response = owner_client.get(f"/schedules/{schedule.pk}/")
    assert response.status_code == 200
    assert response.text.count("Deleted with its conversation") == 0


def test_a_paused_schedules_page_names_each_runs_exhausted_limit_without_reading_its_runs_twice(
    owner, owner_client, admin_user
):
    schedule = make_budget_paused(owner, admin_user)  # two runs out of dollars: budget exhausted (cost)
    owner_client.get(f"/schedules/{schedule.pk}/")  # the session and caches warm, as on any later visit

    with CaptureQueriesContext(connection) as queries:
        response = owner_client.get(f"/schedules/{schedule.pk}/")

    assert response.status_code == 200
    assert response.text.count("budget exhausted (cost)") == 3  # the pause's reason and each run
    run_reads = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('SELECT "runs_run"')]
    assert run_reads == []  # the occurrences brought their runs; the events' runs are those
    assert len(queries.captured_queries) <= 12  # the top bar's alerts come with the budget row


def test_a_completed_one_time_schedule_offers_no_actions(owner, owner_client, agent):
    from datetime import timedelta

    from django.utils import timezone

    schedule = make_schedule(owner, agent, run_at=timezone.now() + timedelta(hours=1))
    Schedule.objects.filter(pk=schedule.pk).update(status=Schedule.Status.COMPLETED)
    html = owner_client.get(f"/schedules/{schedule.pk}/").text
    assert "Completed: its only run has happened." in html
    assert "/pause/" not in html and "/resume/" not in html and "/edit/" not in html
