"""The owner talks to the assistant on the dashboard: a new conversation, its page with the
steps, the answer and the schedule cards, follow-ups, Stop, and every refusal in plain words."""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal

import pytest
import time_machine
from django_q.models import OrmQ

from accounting.models import OwnerBudget, Reservation
from runs import conversations
from runs.models import Agent, Conversation, Run
from schedules.models import Schedule
from tests.factories import (
    answered_conversation,
    chat,
    chat_creates_at_once,
    fail,
    make_assistant,
    make_schedule,
    materialize,
)
from tests.runs.test_history import _earlier
from tests.views.conftest import HTMX

pytestmark = pytest.mark.django_db

THURSDAY_MORNING = datetime.fromisoformat("2026-09-03T06:00:00+00:00")


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.fixture
def assistant(db) -> Agent:
    return make_assistant()


def _queued(owner, assistant, message="hello") -> Run:
    return conversations.start_conversation(owner.pk, assistant, message, enqueue=lambda ids: None)


# -- a new conversation ---------------------------------------------------------------------------


def test_the_new_conversation_form_offers_the_agents_with_the_owners_last_one_chosen(owner, owner_client):
    make_assistant()
    writer = make_assistant("writer")
    answered_conversation(owner, writer)

    response = owner_client.get("/conversations/new/")

    assert response.status_code == 200
    assert '<option value="writer" selected>writer</option>' in response.text
    assert "every weekday at 7:30 brief me on AI news" in response.text


def test_sending_the_first_message_queues_its_run_and_opens_the_conversation(owner, owner_client, assistant):
    response = owner_client.post("/conversations/new/", {"agent": assistant.name, "message": "hello there"})

    conversation = Conversation.objects.get(owner=owner)
    assert response.status_code == 302 and response["Location"] == f"/conversations/{conversation.pk}/"
    run = conversation.runs.get()
    assert (run.status, run.prompt, conversation.agent) == ("queued", "hello there", assistant)
    assert Reservation.objects.filter(run_id=run.pk, released_at__isnull=True).count() == 1
    assert OrmQ.objects.get().task["args"] == (run.pk,)
    page = _text(owner_client.get(response["Location"]).text)
    assert "hello there" in page and "Queued" in page and "Waiting for a worker to pick it up" in page


def test_an_htmx_send_redirects_the_browser_to_the_conversation(owner_client, assistant):
    response = owner_client.post(
        "/conversations/new/", {"agent": assistant.name, "message": "hello"}, headers=HTMX
    )
    conversation = Conversation.objects.get()
    assert response["HX-Redirect"] == f"/conversations/{conversation.pk}/"


@pytest.mark.parametrize(
    ("message", "words"),
    [("   ", "message must not be empty"), ("x" * 8001, "message must be at most 8,000 characters")],
    ids=["empty", "oversized"],
)
def test_an_empty_or_oversized_first_message_is_refused_and_nothing_is_written(
    owner_client, assistant, message, words
):
    response = owner_client.post("/conversations/new/", {"agent": assistant.name, "message": message})

    assert response.status_code == 200
    assert words in response.text
    assert not Conversation.objects.exists() and not Run.objects.exists()


def test_an_agent_that_is_not_there_to_use_is_refused(owner_client, assistant):
    make_assistant("writer")
    Agent.objects.filter(pk=assistant.pk).update(is_active=False)

    response = owner_client.post("/conversations/new/", {"agent": assistant.name, "message": "hello"})

    assert "there is no active agent named &#x27;sim-assistant&#x27; you can use" in response.text
    assert not Conversation.objects.exists()


def test_a_refused_admission_is_shown_with_the_figures_and_nothing_is_written(owner, owner_client, assistant):
    OwnerBudget.objects.filter(owner_id=owner.pk).update(daily_ceiling=Decimal("3.00"))

    response = owner_client.post("/conversations/new/", {"agent": assistant.name, "message": "hello"})

    text = _text(response.text)
    assert "the daily ceiling of USD 3.00 would be exceeded: spent USD 0.00, reserved USD 0.00" in text
    assert "this run needs USD 5.00" in text
    assert not Conversation.objects.exists() and not Reservation.objects.exists()


# -- the conversation page ------------------------------------------------------------------------


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_the_page_shows_each_step_the_answer_and_the_schedule_card(owner, owner_client, assistant):
    chat_creates_at_once(owner)  # the card of a proposal: tests/schedules/test_proposals.py
    run = chat(owner, assistant, "every weekday at 7:30 brief me on AI news")
    schedule = Schedule.objects.get(owner=owner)

    text = _text(owner_client.get(f"/conversations/{run.conversation_id}/").text)

    assert (
        "Step 1 · model call Tool clock.now → returned 2026-09-03T09:00:00+03:00 (Europe/Riga, Thursday)"
        in text
    )
    assert f"Step 2 · model call Tool schedule.create → returned Created schedule {schedule.pk}" in text
    assert "Done: I created schedule" in text
    assert (
        "Schedule created · revision 1 · schedule.create via chat AI news briefing Active "
        "When Weekdays at 07:30, Europe/Riga Next run 4 Sep 2026, 07:30 EEST "
        "Budget per run USD 5.00 Reserves 2 steps / 2 model calls / USD 1.00 "
        "Failure limit 2 failed runs in a row pause it"
    ) in text
    assert "3 steps · 3 model calls · 2 tool calls · USD" in text
    assert "Steps: 3 of 10 steps · reserve 1" in text
    assert "History sent: 0 earlier exchanges" in text


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_a_budget_change_in_chat_shows_the_refusal_and_what_to_do_instead(owner, owner_client, assistant):
    chat_creates_at_once(owner)  # the card of a proposal: tests/schedules/test_proposals.py
    first = chat(owner, assistant, "every weekday at 7:30 brief me on AI news")
    schedule = Schedule.objects.get(owner=owner)
    chat(owner, assistant, f"give schedule {schedule.pk} a USD 20 budget", conversation=first.conversation)

    text = _text(owner_client.get(f"/conversations/{first.conversation_id}/").text)

    assert "Refused: a schedule\u2019s limits cannot be changed in chat." in text
    assert "schedule.update did not apply max cost USD 20.00 to AI news briefing" in text
    assert "What to do instead: ask an admin to pin an explicit revision" in text
    assert "I cannot give schedule" in text
    assert schedule.revisions.count() == 1


def test_while_a_run_is_in_flight_the_tail_polls_and_stop_is_offered(owner, owner_client, assistant):
    run = _queued(owner, assistant)

    page = owner_client.get(f"/conversations/{run.conversation_id}/").text
    poll = owner_client.get(f"/conversations/{run.conversation_id}/", headers=HTMX)

    assert 'hx-trigger="every 1s"' in page
    assert f'action="/runs/{run.pk}/cancel/"' in page
    assert '<button id="send-button" type="submit" class="button button--primary" disabled' in page
    assert "Refresh the page to see its progress" in page  # for a browser without JavaScript
    assert poll.status_code == 200 and poll.text.lstrip().startswith('<div id="tail"')
    assert "<html" not in poll.text


def test_each_poll_shows_the_steps_committed_so_far_then_the_synthesis_turn_and_the_answer(
    owner, owner_client
):
    # A real run on a scripted provider; at each model request the owner's page polls once, so
    # the test sees what the browser sees between steps.
    from tests.runs.wire import OPENAI, Provider, make_wire_agent, until_told

    agent = make_wire_agent(OPENAI, tools=["clock.now"], max_steps=3, max_model_calls=3)
    run = conversations.start_conversation(owner.pk, agent, "What time is it?", enqueue=lambda ids: None)
    tail = f"/conversations/{run.conversation_id}/"
    polls: list[str] = []
    model = until_told(OPENAI)

    def reply(request):
        polls.append(_text(owner_client.get(tail, headers=HTMX).text))
        return model(request)

    provider = Provider(reply)
    with provider.client() as client:
        ended = conversations.execute_message(run.pk, client=client, sleep=lambda s: None)
    final = owner_client.get(tail, headers=HTMX)

    assert len(polls) == 3  # two tool turns, then the synthesis-only turn
    first, second, third = polls
    assert "working, step 1…" in first and "Step 1" not in first
    # Step 1 committed with its tool call and, clock.now answering at once, with its result: both
    # were written as the next request went out.
    assert "working, step 2…" in second and "Step 1 · model call" in second
    assert "clock.now → returned" in second and "running…" not in second
    assert "working, step 3…" in third and "Step 2 · model call" in third
    assert "clock.now → returned" in third
    # The synthesis-only turn is announced as its request goes out, with what activated it.
    assert "From step 3 the requests were synthesis-only : the steps reserve was reached" in third
    assert "synthesis-only" not in first + second
    assert ended is not None and ended.status == "completed" and ended.synthesis_step == 3
    text = _text(final.text)
    assert final.status_code == 286  # the poll that sees the end stops polling
    assert "From step 3 the requests were synthesis-only" in text
    assert "Final answer from the evidence gathered." in text and "working" not in text


def test_the_poll_that_sees_the_run_ended_stops_polling_and_enables_send(owner, owner_client, assistant):
    run = _queued(owner, assistant)
    conversations.execute_message(run.pk)

    poll = owner_client.get(f"/conversations/{run.conversation_id}/", headers=HTMX)

    assert poll.status_code == 286
    assert "hx-trigger" not in poll.text
    assert '<div id="composer-foot" class="composer__foot" hx-swap-oob="true">' in poll.text
    assert '<button id="send-button" type="submit" class="button button--primary">Send</button>' in poll.text
    assert "Up to 8,000 characters." in poll.text
    assert "I can set up briefings and reminders" in poll.text


def test_a_follow_up_is_sent_from_the_page(owner, owner_client, assistant):
    conversation = answered_conversation(owner, assistant)

    response = owner_client.post(
        f"/conversations/{conversation.pk}/messages/", {"message": "what time is it?"}
    )

    assert response.status_code == 302 and response["Location"] == f"/conversations/{conversation.pk}/#tail"
    assert conversation.runs.filter(status="queued", prompt="what time is it?").count() == 1


def test_an_htmx_follow_up_returns_a_fresh_composer_the_polling_tail_and_the_previous_exchange(
    owner, owner_client, assistant
):
    conversation = answered_conversation(owner, assistant, "first question")

    response = owner_client.post(
        f"/conversations/{conversation.pk}/messages/", {"message": "second question"}, headers=HTMX
    )

    html = response.text
    assert html.lstrip().startswith('<form id="composer"')
    assert '<div id="tail" class="tail" hx-get=' in html and 'hx-swap-oob="true"' in html
    assert '<div hx-swap-oob="beforeend:#thread">' in html and "first question" in html
    assert "second question" in html


def test_a_second_message_while_one_is_in_flight_is_refused_in_words(owner, owner_client, assistant):
    run = _queued(owner, assistant)

    response = owner_client.post(f"/conversations/{run.conversation_id}/messages/", {"message": "again?"})

    assert "The assistant is still answering the previous message." in response.text
    assert Run.objects.filter(conversation_id=run.conversation_id).count() == 1


def test_an_empty_follow_up_is_refused_in_the_composer(owner, owner_client, assistant):
    conversation = answered_conversation(owner, assistant)

    response = owner_client.post(f"/conversations/{conversation.pk}/messages/", {"message": ""}, headers=HTMX)

    assert response.text.lstrip().startswith('<form id="composer"')
    assert "message must not be empty" in response.text
    assert conversation.runs.count() == 1


def test_stop_cancels_the_run_and_the_repeat_says_it_had_ended(owner, owner_client, assistant):
    run = _queued(owner, assistant)

    first = owner_client.post(f"/runs/{run.pk}/cancel/", headers=HTMX)
    again = owner_client.post(f"/runs/{run.pk}/cancel/", follow=True)

    run.refresh_from_db()
    assert (run.status, run.failure_reason) == ("cancelled", "")
    assert "Stopped. A stopped run is not a failure, and its reservation is released." in first.text
    assert "Stopped before it answered." in first.text
    assert "It had already ended; nothing was stopped." in again.text
    assert Reservation.objects.get(run_id=run.pk).released_at is not None


def test_a_scheduled_runs_conversation_is_read_there_and_takes_no_messages(owner, owner_client, agent):
    run = fail(materialize(make_schedule(owner, agent, title="Morning briefing")))

    text = _text(owner_client.get(f"/conversations/{run.conversation_id}/").text)
    refused = owner_client.post(f"/conversations/{run.conversation_id}/messages/", {"message": "why?"})

    assert "the record of a run of Morning briefing" in text
    assert 'id="composer"' not in text
    assert "it takes no messages" in refused.text


def test_the_page_says_when_older_messages_are_no_longer_sent(owner, owner_client):
    agent = make_assistant(history_turns=5)
    conversation = _earlier(owner, agent, 30)
    chat(owner, agent, "and now?", conversation=conversation)

    text = _text(owner_client.get(f"/conversations/{conversation.pk}/").text)

    assert "Older messages are no longer sent to the assistant." in text
    assert "at most 5 of them and about 12,000 tokens" in text
    assert "History sent: 5 earlier exchanges; older ones were not sent" in text
    assert "Show earlier messages" in text


def test_the_page_costs_a_fixed_number_of_queries(owner, owner_client, django_assert_max_num_queries):
    agent = make_assistant()
    conversation = _earlier(owner, agent, 200)
    with django_assert_max_num_queries(12):
        response = owner_client.get(f"/conversations/{conversation.pk}/")
    assert response.status_code == 200


# -- the rules of every view ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/conversations/{c}/messages/", "/runs/{r}/cancel/"])
def test_get_on_a_post_only_url_is_405(owner, owner_client, assistant, path):
    run = _queued(owner, assistant)
    assert owner_client.get(path.format(c=run.conversation_id, r=run.pk)).status_code == 405


def test_another_owners_conversation_and_run_are_404(owner, other_client, assistant):
    run = _queued(owner, assistant)

    assert other_client.get(f"/conversations/{run.conversation_id}/").status_code == 404
    assert (
        other_client.post(f"/conversations/{run.conversation_id}/messages/", {"message": "hi"}).status_code
        == 404
    )
    assert other_client.post(f"/runs/{run.pk}/cancel/").status_code == 404
    run.refresh_from_db()
    assert run.status == "queued" and Run.objects.count() == 1


def test_every_post_needs_the_csrf_token(owner, csrf_client, assistant):
    run = _queued(owner, assistant)
    for path, data in (
        ("/conversations/new/", {"agent": assistant.name, "message": "hi"}),
        (f"/conversations/{run.conversation_id}/messages/", {"message": "hi"}),
        (f"/runs/{run.pk}/cancel/", {}),
    ):
        assert csrf_client.post(path, data).status_code == 403
    run.refresh_from_db()
    assert run.status == "queued" and Run.objects.count() == 1


def test_a_deleted_conversation_is_404(owner, owner_client, assistant):
    conversation = answered_conversation(owner, assistant)
    owner_client.post(f"/conversations/{conversation.pk}/delete/")

    assert owner_client.get(f"/conversations/{conversation.pk}/").status_code == 404
    assert (
        owner_client.post(f"/conversations/{conversation.pk}/messages/", {"message": "hi"}).status_code == 404
    )


# -- the list, the run page and the schedule page link to it ----------------------------------------


def test_the_list_shows_agent_last_message_and_a_run_in_progress_newest_activity_first(
    owner, owner_client, assistant
):
    quiet = answered_conversation(owner, assistant, "an old question")
    busy = _queued(owner, assistant, "a new question")

    html = owner_client.get("/conversations/").text

    assert html.index(f'href="/conversations/{busy.conversation_id}/"') < html.index(
        f'href="/conversations/{quiet.pk}/"'
    )
    assert "In progress" in _text(html) and "sim-assistant" in html
    assert "New conversation" in html


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_the_schedules_revision_history_says_via_chat_and_links_back(owner, owner_client, assistant):
    chat_creates_at_once(owner)  # the card of a proposal: tests/schedules/test_proposals.py
    run = chat(owner, assistant, "every weekday at 7:30 brief me on AI news")
    schedule = Schedule.objects.get(owner=owner)

    html = owner_client.get(f"/schedules/{schedule.pk}/").text

    assert "<code>schedule.create</code> via chat" in html
    assert f'href="/conversations/{run.conversation_id}/#run-{run.pk}"' in html
    owner_client.post(f"/conversations/{run.conversation_id}/delete/")
    assert "Asked for in a conversation since deleted" in owner_client.get(f"/schedules/{schedule.pk}/").text


def test_the_run_page_links_to_its_conversation(owner, owner_client, assistant):
    run = _queued(owner, assistant)
    assert f'href="/conversations/{run.conversation_id}/"' in owner_client.get(f"/runs/{run.pk}/").text


def test_the_delete_page_reached_from_the_conversation_posts_without_htmx(owner, owner_client, assistant):
    conversation = answered_conversation(owner, assistant)
    html = owner_client.get(f"/conversations/{conversation.pk}/delete/").text
    assert "hx-post" not in html and f'action="/conversations/{conversation.pk}/delete/"' in html
