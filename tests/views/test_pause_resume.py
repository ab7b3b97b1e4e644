"""Resume keeps the count and says so; pause and resume are idempotent POSTs."""

from __future__ import annotations

import pytest

from schedules import services
from schedules.models import PauseEvent, Schedule
from tests.factories import make_schedule
from tests.views.conftest import HTMX

pytestmark = pytest.mark.django_db

SENTENCE = (
    "The failure count stays at 2 of 2: if the next run fails, the schedule pauses again; "
    "a completed run resets it."
)


def test_the_resume_control_states_the_kept_count_before_the_click(owner_client, paused_after_two_failures):
    schedule = paused_after_two_failures
    response = owner_client.get(f"/schedules/{schedule.pk}/")
    assert response.status_code == 200
    html = response.text
    assert f'hx-confirm="{SENTENCE}"' in html
    assert f'<p class="action__note" id="resume-note-{schedule.pk}">{SENTENCE}</p>' in html


def test_htmx_resume_swaps_the_status_panel_and_keeps_the_count(owner_client, paused_after_two_failures):
    schedule = paused_after_two_failures
    response = owner_client.post(f"/schedules/{schedule.pk}/resume/", headers=HTMX)
    schedule.refresh_from_db()
    assert response.status_code == 200
    assert schedule.status == Schedule.Status.ACTIVE
    assert schedule.consecutive_failures == 2
    assert response.text.lstrip().startswith('<section id="status"')
    assert "<html" not in response.text
    assert f"Resumed. {SENTENCE}" in response.text
    assert "if the next run fails, the schedule pauses again" in response.text
    assert "HX-Request" in response["Vary"]
    history = response.text.split('<section id="pause-history"', 1)[1]
    assert history.startswith(' class="card" aria-labelledby="pauses-heading" hx-swap-oob="true">')
    assert "<strong>Resumed</strong>" in history and "count 2 of 2" in history
    resume = PauseEvent.objects.filter(schedule=schedule).latest("created_at")
    assert (resume.action, resume.failures_at_event, resume.failure_limit) == ("resume", 2, 2)


def test_without_javascript_resume_asks_the_same_question_as_a_step_of_its_own(
    owner_client, paused_after_two_failures
):
    schedule = paused_after_two_failures
    response = owner_client.post(f"/schedules/{schedule.pk}/resume/", follow=True)
    assert response.redirect_chain == [(f"/schedules/{schedule.pk}/?confirm=resume#status", 302)]
    schedule.refresh_from_db()
    assert schedule.status == Schedule.Status.PAUSED  # nothing happened yet
    panel = response.text.split('<section id="status"', 1)[1].split("</section>", 1)[0]
    assert f"Resume “{schedule.title}”?" in panel and SENTENCE in panel
    assert 'name="confirmed" value="yes"' in panel and "Yes, resume" in panel
    assert PauseEvent.objects.filter(schedule=schedule, action="resume").count() == 0


def test_plain_resume_confirmed_redirects_with_the_sentence_in_the_panel(
    owner_client, paused_after_two_failures
):
    schedule = paused_after_two_failures
    response = owner_client.post(f"/schedules/{schedule.pk}/resume/", {"confirmed": "yes"}, follow=True)
    assert response.redirect_chain == [(f"/schedules/{schedule.pk}/#status", 302)]
    panel = response.text.split('<section id="status"', 1)[1].split("</section>", 1)[0]
    assert f"Resumed. {SENTENCE}" in panel  # next to the panel, as with HTMX, not at the page top
    assert f"Resumed. {SENTENCE}" not in response.text.split('<main id="main"', 1)[0]
    schedule.refresh_from_db()
    assert schedule.status == Schedule.Status.ACTIVE and schedule.consecutive_failures == 2


def test_a_repeated_resume_says_so_and_writes_one_transition(owner_client, paused_after_two_failures):
    schedule = paused_after_two_failures
    owner_client.post(f"/schedules/{schedule.pk}/resume/", headers=HTMX)
    again = owner_client.post(f"/schedules/{schedule.pk}/resume/", headers=HTMX)
    assert again.status_code == 200
    assert "This schedule is not paused; nothing changed." in again.text
    assert PauseEvent.objects.filter(schedule=schedule, action="resume").count() == 1


def test_pause_writes_an_owner_pause_and_a_repeat_changes_nothing(owner, owner_client, agent):
    schedule = make_schedule(owner, agent)
    first = owner_client.post(f"/schedules/{schedule.pk}/pause/", headers=HTMX)
    second = owner_client.post(f"/schedules/{schedule.pk}/pause/", headers=HTMX)
    schedule.refresh_from_db()
    assert first.status_code == second.status_code == 200
    assert "Paused. No new runs start until you resume it" in first.text
    assert "This schedule is not active; nothing changed." in second.text
    assert schedule.status == Schedule.Status.PAUSED
    events = list(PauseEvent.objects.filter(schedule=schedule))
    assert [(e.action, e.reason, e.actor_id) for e in events] == [("pause", "owner", owner.pk)]
    assert "Paused on" in first.text and "by you." in first.text


def test_plain_pause_redirects_to_the_detail_page(owner, owner_client, agent):
    schedule = make_schedule(owner, agent)
    response = owner_client.post(f"/schedules/{schedule.pk}/pause/")
    assert response.status_code == 302
    assert response["Location"] == f"/schedules/{schedule.pk}/#status"


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_get_on_an_action_is_405(owner_client, paused_after_two_failures, action):
    response = owner_client.get(f"/schedules/{paused_after_two_failures.pk}/{action}/")
    assert response.status_code == 405


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_another_owners_schedule_is_404_and_untouched(other_client, paused_after_two_failures, action):
    schedule = paused_after_two_failures
    response = other_client.post(f"/schedules/{schedule.pk}/{action}/", headers=HTMX)
    assert response.status_code == 404
    assert PauseEvent.objects.filter(schedule=schedule).count() == 1


def test_an_action_without_the_csrf_token_is_refused(csrf_client, paused_after_two_failures):
    schedule = paused_after_two_failures
    response = csrf_client.post(f"/schedules/{schedule.pk}/resume/", headers=HTMX)
    assert response.status_code == 403
    schedule.refresh_from_db()
    assert schedule.status == Schedule.Status.PAUSED


def test_an_action_with_the_htmx_csrf_header_goes_through(csrf_client, paused_after_two_failures):
    schedule = paused_after_two_failures
    page = csrf_client.get(f"/schedules/{schedule.pk}/")
    token = page.context["csrf_token"]
    assert f'hx-headers=\'{{"x-csrftoken": "{token}"}}\'' in page.text
    response = csrf_client.post(
        f"/schedules/{schedule.pk}/resume/", headers={**HTMX, "X-CSRFToken": str(token)}
    )
    assert response.status_code == 200
    schedule.refresh_from_db()
    assert schedule.status == Schedule.Status.ACTIVE


def test_anonymous_actions_go_to_sign_in(client, paused_after_two_failures):
    response = client.post(f"/schedules/{paused_after_two_failures.pk}/resume/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_a_schedule_resumed_below_the_limit_states_how_many_failures_remain(owner, owner_client, agent):
    schedule = make_schedule(owner, agent)
    services.pause_schedule(schedule, by=owner)
    response = owner_client.post(f"/schedules/{schedule.pk}/resume/", headers=HTMX)
    assert "The failure count stays at 0 of 2: 2 failed runs in a row pause the schedule." in response.text
