"""Conversations: the list, and deletion that says what goes and what stays."""

from __future__ import annotations

import re

import pytest

from accounting.models import AccountingEvent, LedgerEntry
from runs.models import Conversation, Run, TranscriptEntry
from schedules.models import Schedule
from tests.factories import fail, finish, make_schedule, materialize
from tests.views.conftest import HTMX, overloaded, spend_on

pytestmark = pytest.mark.django_db


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.fixture
def failed_run(owner, agent) -> Run:
    schedule = make_schedule(owner, agent, title="Morning briefing")
    run = fail(materialize(schedule), overloaded())
    spend_on(run, "0.42", schedule_id=schedule.pk)
    return run


def test_the_list_shows_runs_cost_and_schedule(owner_client, failed_run):
    text = _text(owner_client.get("/conversations/").text)
    assert failed_run.conversation.title in text
    assert "Morning briefing" in text and "1 1 failed" in text
    assert "Delete…" in text


def test_the_confirmation_says_what_is_deleted_and_what_stays(owner_client, failed_run):
    response = owner_client.get(f"/conversations/{failed_run.conversation_id}/delete/")
    text = _text(response.text)
    assert response.status_code == 200
    assert "Deleted 1 run 1 transcript entry (prompts, answers, tool results) 1 failure message" in text
    assert (
        "Stays USD 0.42 spent, in the budget ledger 1 accounting event with the failure classification"
        in text
    )
    assert "The schedule “Morning briefing”" in text


def test_htmx_asks_for_the_confirmation_inline(owner_client, failed_run):
    response = owner_client.get(f"/conversations/{failed_run.conversation_id}/delete/", headers=HTMX)
    assert response.text.lstrip().startswith(
        f'<tr class="confirm-host" id="confirm-{failed_run.conversation_id}">'
    )
    assert "<html" not in response.text


def test_deleting_removes_runs_and_content_and_keeps_spend_and_events(owner_client, failed_run):
    conversation_id, run_id = failed_run.conversation_id, failed_run.pk
    response = owner_client.post(f"/conversations/{conversation_id}/delete/", follow=True)
    assert response.redirect_chain == [("/conversations/", 302)]
    assert "and its 1 run. Spend and accounting events stay." in response.text
    assert not Conversation.objects.filter(pk=conversation_id).exists()
    assert not Run.objects.filter(pk=run_id).exists()
    assert not TranscriptEntry.objects.filter(run_id=run_id).exists()
    assert LedgerEntry.objects.filter(run_id=run_id).count() == 1
    assert AccountingEvent.objects.filter(run_id=run_id).count() == 1
    assert Schedule.objects.filter(title="Morning briefing").exists()


def test_an_htmx_delete_returns_the_notice_row_and_removes_the_listed_row(owner_client, failed_run):
    conversation_id = failed_run.conversation_id
    response = owner_client.post(f"/conversations/{conversation_id}/delete/", headers=HTMX)
    assert response.status_code == 200
    assert "Spend and accounting events stay." in response.text
    assert f'<tr id="conversation-{conversation_id}" hx-swap-oob="delete">' in response.text


def test_a_conversation_with_a_run_in_flight_is_not_deleted(owner, owner_client, agent):
    occurrence = materialize(make_schedule(owner, agent))
    run = Run.objects.get(pk=occurrence.run_id)
    response = owner_client.post(f"/conversations/{run.conversation_id}/delete/", follow=True)
    assert "still in flight" in response.text
    assert Run.objects.filter(pk=run.pk).exists()


def test_a_repeated_delete_is_404(owner_client, failed_run):
    url = f"/conversations/{failed_run.conversation_id}/delete/"
    owner_client.post(url)
    assert owner_client.post(url).status_code == 404


def test_another_owners_conversation_is_404_and_stays(other_client, failed_run):
    url = f"/conversations/{failed_run.conversation_id}/delete/"
    assert other_client.get(url).status_code == 404
    assert other_client.post(url).status_code == 404
    assert Run.objects.filter(pk=failed_run.pk).exists()


def test_deleting_needs_the_csrf_token(csrf_client, failed_run):
    assert csrf_client.post(f"/conversations/{failed_run.conversation_id}/delete/").status_code == 403
    assert Run.objects.filter(pk=failed_run.pk).exists()


def test_the_list_costs_a_fixed_number_of_queries(owner, owner_client, agent, django_assert_max_num_queries):
    schedule = make_schedule(owner, agent)
    for _ in range(30):
        finish(materialize(schedule))
    with django_assert_max_num_queries(12):
        response = owner_client.get("/conversations/")
    assert "Older →" in response.text
    assert "← Newer" in owner_client.get("/conversations/?page=2").text


def test_no_conversations_says_where_they_come_from(owner_client):
    assert "Conversations appear here when a schedule runs" in owner_client.get("/conversations/").text


def test_a_page_number_beyond_any_history_is_an_empty_page_not_an_error(owner_client):
    response = owner_client.get("/conversations/?page=99999999999999999999")
    assert response.status_code == 200
