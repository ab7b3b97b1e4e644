"""Confirm before chat creates a schedule (docs/contract.md#confirm-before-chat-creates-a-schedule):
schedule.create in a conversation makes a proposal; the schedule is created, exactly by the policy,
only when the owner confirms it (the card, the API or "yes"), once however often it is confirmed;
declined or left for 24 hours, nothing is created. An owner setting turns the confirmation off."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from accounting.formatting import money_text
from runs import conversations
from runs.models import Conversation, Run, TranscriptEntry
from runs.tools import ToolContext, ToolError
from schedules import forecast, proposals, services
from schedules.models import NotificationSettings, Proposal, Schedule, ScheduleRevision
from schedules.tools import CreateArguments, schedule_create
from tests.concurrency import race
from tests.factories import chat, chat_creates_at_once, make_assistant, make_schedule, running_run
from tests.views.conftest import HTMX

pytestmark = pytest.mark.django_db

THURSDAY_MORNING = datetime.fromisoformat("2026-09-03T06:00:00+00:00")  # 09:00 in Riga
WEEKDAY_BRIEFING = "every weekday at 7:30 brief me on AI news"


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.fixture
def assistant(db):
    return make_assistant()


def _proposed(owner, assistant) -> tuple[Run, Proposal]:
    run = chat(owner, assistant, WEEKDAY_BRIEFING)
    return run, Proposal.objects.get(owner=owner)


def _tool_result(run: Run) -> str:
    return TranscriptEntry.objects.get(run=run, role="tool", tool_name="schedule_create").content


# -- proposing ------------------------------------------------------------------------------------


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_schedule_create_in_chat_makes_a_proposal_and_no_schedule(owner, assistant):
    run, proposal = _proposed(owner, assistant)

    assert not Schedule.objects.exists()
    assert (proposal.status, proposal.conversation_id, proposal.run_id) == (
        "open",
        run.conversation_id,
        run.pk,
    )
    assert proposal.agent == assistant
    assert proposal.arguments == {
        "title": "AI news briefing",
        "prompt": proposal.arguments["prompt"],
        "cron": "30 7 * * 1-5",
        "timezone": "Europe/Riga",
    }
    assert proposal.expires_at - proposal.created_at == timedelta(hours=24)
    assert _tool_result(run) == (
        "Proposed schedule “AI news briefing”: Weekdays at 07:30, Europe/Riga. It is not created yet: the "
        "owner confirms or declines it on the card shown in the conversation (it expires in 24 hours)."
    )
    assert run.answer.startswith("I propose a schedule “AI news briefing”: Weekdays at 07:30, Europe/Riga.")
    assert "confirm it there, or answer “yes”" in run.answer


def test_without_a_settings_row_the_owner_is_asked_and_the_row_is_not_needed(owner, assistant):
    assert not NotificationSettings.objects.filter(owner=owner).exists()
    assert proposals.confirmation_on(owner.pk) is True
    _proposed(owner, assistant)
    assert not Schedule.objects.exists()


@pytest.fixture
def context(owner, assistant):
    conversation = Conversation.objects.create(owner=owner, agent=assistant, title="Chat")
    run = running_run(owner, assistant, conversation=conversation)
    return ToolContext(run=run, agent=assistant, http=None, delegate=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        (
            {"cron": "* * * * *", "timezone": "Europe/Riga"},
            "a schedule made in chat may fire at most every 15",
        ),
        ({"cron": "0 9 * * *"}, "timezone is required with cron"),
        ({"cron": "0 0 30 2 *", "timezone": "Europe/Riga"}, "never fires"),
        ({"run_at": "2020-01-01T09:00:00+00:00"}, "run_at must be in the future"),
        (
            {"cron": "0 9 * * *", "timezone": "UTC", "max_cost": "20"},
            "limits are pinned by the schedule.create",
        ),
    ],
    ids=["every minute", "no time zone", "never fires", "in the past", "a limit"],
)
def test_an_invalid_proposal_is_refused_as_the_creation_was(context, arguments, refusal):
    with pytest.raises(ToolError, match=refusal):
        schedule_create(CreateArguments(title="News", prompt="Brief me.", **arguments), context)
    assert not Proposal.objects.exists() and not Schedule.objects.exists()


def test_no_room_for_one_more_active_schedule_is_refused_when_proposing(context, owner, assistant, settings):
    settings.MAX_ACTIVE_SCHEDULES = 1
    make_schedule(owner, assistant)
    with pytest.raises(ToolError, match="You already have 1 active schedule"):
        schedule_create(
            CreateArguments(title="News", prompt="Brief me.", cron="0 9 * * *", timezone="UTC"), context
        )
    assert not Proposal.objects.exists()


def test_with_the_setting_off_chat_creates_the_schedule_at_once(owner, assistant):
    chat_creates_at_once(owner)

    run = chat(owner, assistant, WEEKDAY_BRIEFING)

    schedule = Schedule.objects.get(owner=owner)
    assert not Proposal.objects.exists()
    assert run.answer.startswith(f"Done: I created schedule {schedule.pk} “AI news briefing”")


# -- confirming -----------------------------------------------------------------------------------


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_confirming_creates_exactly_the_revision_the_policy_pins(owner, assistant):
    run, proposal = _proposed(owner, assistant)

    schedule, created = proposals.confirm(proposal.pk, owner)

    assert created is True
    revision = schedule.revision
    assert (revision.number, revision.path, revision.via) == (1, ScheduleRevision.Path.CREATE, "chat")
    assert revision.limits == services.create_policy_limits(assistant, owner.pk).to_json()
    assert revision.max_consecutive_failures == services.CREATE_FAILURE_LIMIT
    assert revision.monthly_cap is None
    assert (revision.conversation_id, revision.run_id) == (run.conversation_id, run.pk)
    assert (revision.cron, revision.timezone, revision.title) == (
        "30 7 * * 1-5",
        "Europe/Riga",
        "AI news briefing",
    )
    assert revision.prompt == proposal.arguments["prompt"] and revision.agent == assistant
    assert schedule.next_occurrence_at == datetime.fromisoformat("2026-09-04T07:30:00+03:00")
    proposal.refresh_from_db()
    assert (proposal.status, proposal.schedule_id, proposal.decided_at) == (
        "confirmed",
        schedule.pk,
        THURSDAY_MORNING,
    )


def test_confirming_twice_yields_one_schedule(owner, assistant):
    _, proposal = _proposed(owner, assistant)

    first, created = proposals.confirm(proposal.pk, owner)
    again, created_again = proposals.confirm(proposal.pk, owner)

    assert (created, created_again) == (True, False)
    assert again.pk == first.pk and Schedule.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_twenty_confirmations_at_once_create_one_schedule(owner, assistant):
    _, proposal = _proposed(owner, assistant)

    results = race([lambda: proposals.confirm(proposal.pk, owner)] * 20)

    assert all(isinstance(result, tuple) for result in results), results
    assert sorted(created for _, created in results) == [False] * 19 + [True]
    assert {schedule.pk for schedule, _ in results} == set(Schedule.objects.values_list("pk", flat=True))
    assert Schedule.objects.count() == 1 and ScheduleRevision.objects.count() == 1


def test_another_owner_can_neither_confirm_nor_decline(owner, other_owner, assistant):
    _, proposal = _proposed(owner, assistant)

    with pytest.raises(Proposal.DoesNotExist):
        proposals.confirm(proposal.pk, other_owner)
    with pytest.raises(Proposal.DoesNotExist):
        proposals.decline(proposal.pk, other_owner)
    proposal.refresh_from_db()
    assert proposal.status == "open" and not Schedule.objects.exists()


def test_a_proposal_no_longer_valid_is_not_created_and_stays_open(owner, assistant):
    _, proposal = _proposed(owner, assistant)
    assistant.is_active = False
    assistant.save(update_fields=["is_active"])

    with pytest.raises(proposals.ProposalInvalid, match="there is no active agent named 'sim-assistant'"):
        proposals.confirm(proposal.pk, owner)

    proposal.refresh_from_db()
    assert proposal.status == "open" and not Schedule.objects.exists()


def test_the_cap_on_active_schedules_is_checked_again_when_confirming(owner, assistant, settings):
    _, proposal = _proposed(owner, assistant)
    settings.MAX_ACTIVE_SCHEDULES = 1
    make_schedule(owner, assistant)

    with pytest.raises(services.ScheduleLimit):
        proposals.confirm(proposal.pk, owner)
    proposal.refresh_from_db()
    assert proposal.status == "open"


# -- declining and expiring -----------------------------------------------------------------------


def test_a_declined_proposal_cannot_be_confirmed_and_declining_again_changes_nothing(owner, assistant):
    _, proposal = _proposed(owner, assistant)

    declined = proposals.decline(proposal.pk, owner)
    again = proposals.decline(proposal.pk, owner)

    assert declined.status == again.status == "declined" and again.decided_at == declined.decided_at
    with pytest.raises(proposals.ProposalDeclined):
        proposals.confirm(proposal.pk, owner)
    assert not Schedule.objects.exists()


def test_a_confirmed_proposal_cannot_be_declined(owner, assistant):
    _, proposal = _proposed(owner, assistant)
    proposals.confirm(proposal.pk, owner)

    with pytest.raises(proposals.ProposalConfirmed):
        proposals.decline(proposal.pk, owner)
    assert Schedule.objects.count() == 1


def test_24_hours_later_it_is_expired_and_nothing_can_be_created(owner, assistant):
    with time_machine.travel(THURSDAY_MORNING, tick=False):
        _, proposal = _proposed(owner, assistant)
    with time_machine.travel(THURSDAY_MORNING + timedelta(hours=23, minutes=59), tick=False):
        assert proposals.card(Proposal.objects.get()).status == "open"
    with time_machine.travel(THURSDAY_MORNING + timedelta(hours=24), tick=False):
        assert proposals.card(Proposal.objects.get()).status == "expired"  # read as expired, not yet recorded
        with pytest.raises(proposals.ProposalExpired):
            proposals.confirm(proposal.pk, owner)
        proposal.refresh_from_db()
        assert proposal.status == "expired"  # recorded by the refused confirmation
        with pytest.raises(proposals.ProposalExpired):
            proposals.decline(proposal.pk, owner)
    assert not Schedule.objects.exists()


def test_the_reaper_records_the_expiry_of_stale_proposals_only(owner, assistant):
    with time_machine.travel(THURSDAY_MORNING, tick=False):
        _, stale = _proposed(owner, assistant)
    fresh_run = chat(owner, assistant, "every day at 9 brief me on markets")
    fresh = Proposal.objects.get(run_id=fresh_run.pk)

    assert proposals.expire_stale() == 1
    assert proposals.expire_stale() == 0  # idempotent

    stale.refresh_from_db()
    fresh.refresh_from_db()
    assert (stale.status, fresh.status) == ("expired", "open")


# -- "yes" in the conversation --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["yes", "Yes", " YES please ", "yes, please!", "confirm", "ok.", "Okay", "do it!"]
)
def test_these_answers_are_a_yes(text):
    assert proposals.is_affirmative(text)


@pytest.mark.parametrize("text", ["no", "yes but at 8", "yesterday", "ok?", "not yet", "do it tomorrow"])
def test_these_are_not(text):
    assert not proposals.is_affirmative(text)


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_yes_in_the_conversation_confirms_it_and_the_assistant_says_it_is_done(
    owner, owner_client, assistant
):
    run, proposal = _proposed(owner, assistant)

    response = owner_client.post(f"/conversations/{run.conversation_id}/messages/", {"message": "Yes please"})

    assert response.status_code == 302
    schedule = Schedule.objects.get(owner=owner)
    assert (schedule.revision.run_id, schedule.revision.via) == (run.pk, "chat")
    proposal.refresh_from_db()
    assert (proposal.status, proposal.schedule_id) == ("confirmed", schedule.pk)
    answer = Run.objects.filter(conversation_id=run.conversation_id).order_by("-pk").first()
    assert answer is not None and answer.prompt == "Yes please"  # the message was still sent
    answered = conversations.execute_message(answer.pk, sleep=lambda seconds: None)
    assert answered is not None and answered.answer == "Done — it is on your schedules."


def test_yes_confirms_nothing_when_two_proposals_are_open(owner, assistant):
    run, _ = _proposed(owner, assistant)
    conversation = Conversation.objects.get(pk=run.conversation_id)
    chat(owner, assistant, "every day at 9 brief me on markets", conversation=conversation)

    assert proposals.confirm_from_message(conversation, owner, "yes") is None
    assert Proposal.objects.filter(status="open").count() == 2 and not Schedule.objects.exists()


def test_a_message_that_is_not_a_yes_confirms_nothing(owner, assistant):
    run, proposal = _proposed(owner, assistant)
    conversation = Conversation.objects.get(pk=run.conversation_id)

    assert proposals.confirm_from_message(conversation, owner, "yes, but at 8 instead") is None
    proposal.refresh_from_db()
    assert proposal.status == "open"


def test_yes_from_another_owner_confirms_nothing(owner, other_owner, assistant):
    run, _ = _proposed(owner, assistant)
    conversation = Conversation.objects.get(pk=run.conversation_id)

    assert proposals.confirm_from_message(conversation, other_owner, "yes") is None
    assert not Schedule.objects.exists()


# -- the card -------------------------------------------------------------------------------------


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_the_card_has_the_next_fires_in_the_owners_zone_the_limits_and_the_forecast(owner, assistant):
    _, proposal = _proposed(owner, assistant)

    card = proposals.card(Proposal.objects.select_related("agent").get(pk=proposal.pk))

    assert card.cadence == "Weekdays at 07:30, Europe/Riga"
    assert [fire.isoformat() for fire in card.next_fires] == [
        "2026-09-04T07:30:00+03:00",
        "2026-09-07T07:30:00+03:00",
        "2026-09-08T07:30:00+03:00",
    ]
    assert (card.agent, card.model) == ("sim-assistant", "sim-assistant")
    assert card.limits == services.create_policy_limits(assistant, owner.pk)
    assert (card.max_consecutive_failures, card.monthly_cap) == (2, None)
    # The weekdays left in September from Friday the 4th: 19 fires at most USD 5 each.
    assert card.forecast.remaining_fires == 19
    assert card.forecast.expected == card.forecast.worst == Decimal("95.00")
    assert card.forecast.runs == forecast.Runs(due=19, run=19, refused=0, skipped=0)
    assert card.more_stopped == 0
    assert card.month is not None and card.month_with is not None
    spent = card.month.spent  # the conversation's own run
    assert card.month.expected == card.month.worst == spent > 0
    assert (card.month_with.expected, card.month_with.worst) == (spent + 95, spent + 95)
    assert card.month.ceiling == Decimal("250.00") and card.month_with.ceiling_reached_on is None


# -- the dashboard --------------------------------------------------------------------------------


@time_machine.travel(THURSDAY_MORNING, tick=False)
def test_the_conversation_page_shows_the_card_after_the_run_that_proposed_it(owner, owner_client, assistant):
    run, proposal = _proposed(owner, assistant)

    text = _text(owner_client.get(f"/conversations/{run.conversation_id}/").text)

    assert "Proposed schedule · schedule.create via chat · not created yet" in text
    assert "AI news briefing Open · waiting for you" in text
    assert "When Weekdays at 07:30, Europe/Riga" in text
    assert "Next runs 4 Sep 2026, 07:30 EEST 7 Sep 2026, 07:30 EEST 8 Sep 2026, 07:30 EEST" in text
    assert "Agent sim-assistant ( sim-assistant )" in text
    assert "Failure limit 2 failed runs in a row pause it Monthly cap none" in text
    assert "Forecast this month USD 95.00 expected · USD 95.00 at worst" in text
    card = proposals.card(proposal)
    assert card.month is not None and card.month_with is not None
    assert (
        f"This month: {money_text(card.month.expected)} expected → becomes "
        f"{money_text(card.month_with.expected)} with it, of USD 250.00 ceiling."
    ) in text
    assert text.index("I propose a schedule") < text.index("Proposed schedule ·")  # after the answer
    assert (
        f'action="/proposals/{proposal.pk}/confirm/"'
        in owner_client.get(f"/conversations/{run.conversation_id}/").text
    )


def test_the_ceiling_date_is_named_when_the_proposal_would_reach_it(owner, owner_client, assistant):
    from accounting.models import OwnerBudget

    OwnerBudget.objects.filter(owner_id=owner.pk).update(monthly_ceiling=Decimal("12.00"))
    with time_machine.travel(THURSDAY_MORNING, tick=False):
        run, _ = _proposed(owner, assistant)
        text = _text(owner_client.get(f"/conversations/{run.conversation_id}/").text)

    # USD 5 a run against USD 12 a month: two runs fit (Sep 4 and 7), the other 17 are refused.
    assert "of USD 12.00 ceiling; with it the monthly ceiling is reached on Sep 7 instead of never" in text
    assert "about 17 runs would be refused" in text
    assert "17 of its 19 runs would be refused by your ceilings" in text


def test_confirm_on_the_card_creates_it_and_shows_the_link(owner, owner_client, assistant):
    run, proposal = _proposed(owner, assistant)

    response = owner_client.post(f"/proposals/{proposal.pk}/confirm/", headers=HTMX)

    schedule = Schedule.objects.get(owner=owner)
    text = _text(response.text)
    assert response.status_code == 200
    assert "Created “AI news briefing”: it is on your schedules." in text
    assert f'href="/schedules/{schedule.pk}/"' in response.text and "Created — AI news briefing" in text
    assert "Confirmed" in text and "Confirm</button>" not in response.text

    again = owner_client.post(f"/proposals/{proposal.pk}/confirm/")  # without JavaScript, and a repeat
    assert (
        again.status_code == 302
        and again["Location"] == f"/conversations/{run.conversation_id}/#proposal-{proposal.pk}"
    )
    assert Schedule.objects.count() == 1
    page = _text(owner_client.get(again["Location"]).text)
    assert (
        "It was confirmed already; nothing more was created." in page
        and "Schedule created · revision 1" in page
    )


def test_decline_on_the_card_creates_nothing_and_says_so(owner, owner_client, assistant):
    _, proposal = _proposed(owner, assistant)

    response = owner_client.post(f"/proposals/{proposal.pk}/decline/", headers=HTMX)
    text = _text(response.text)

    assert "Declined: nothing was created." in text and "Declined" in text
    confirm = _text(owner_client.post(f"/proposals/{proposal.pk}/confirm/", headers=HTMX).text)
    assert "You declined this proposal, so it was not created." in confirm
    assert not Schedule.objects.exists()


def test_an_expired_card_says_so_without_buttons(owner, owner_client, assistant):
    with time_machine.travel(THURSDAY_MORNING, tick=False):
        run, _ = _proposed(owner, assistant)
    with time_machine.travel(THURSDAY_MORNING + timedelta(days=1, minutes=1), tick=False):
        page = owner_client.get(f"/conversations/{run.conversation_id}/").text
    assert "Expired" in _text(page) and "without a confirmation: nothing was created." in _text(page)
    assert "Confirm</button>" not in page


def test_the_card_actions_are_post_only_and_the_owners_alone(owner, assistant, owner_client, other_owner):
    from django.test import Client

    _, proposal = _proposed(owner, assistant)
    stranger = Client()
    stranger.force_login(other_owner)

    for action in ("confirm", "decline"):
        assert owner_client.get(f"/proposals/{proposal.pk}/{action}/").status_code == 405
        assert stranger.post(f"/proposals/{proposal.pk}/{action}/").status_code == 404
        assert owner_client.post(f"/proposals/{proposal.pk + 1000}/{action}/").status_code == 404
    proposal.refresh_from_db()
    assert proposal.status == "open"


def test_a_yes_that_cannot_confirm_is_not_sent_and_says_why(owner, owner_client, assistant, settings):
    run, _ = _proposed(owner, assistant)
    settings.MAX_ACTIVE_SCHEDULES = 1
    make_schedule(owner, assistant)

    response = owner_client.post(f"/conversations/{run.conversation_id}/messages/", {"message": "yes"})

    assert "Not sent: the proposed schedule was not created. You already have 1 active schedule" in _text(
        response.text
    )
    assert Run.objects.filter(conversation_id=run.conversation_id).count() == 1


def test_the_setting_is_on_by_default_and_turns_off_and_on(owner, owner_client, assistant):
    page = owner_client.get("/settings/").text
    assert "Ask me to confirm schedules the assistant proposes in chat" in page
    assert re.search(r'name="confirm_chat_schedules" id="id_confirm_chat_schedules" checked', page)

    off = owner_client.post("/settings/chat/", {}, headers=HTMX)
    assert "created at once, without asking you" in off.text and " checked" not in off.text
    assert proposals.confirmation_on(owner.pk) is False
    chat(owner, assistant, WEEKDAY_BRIEFING)
    assert Schedule.objects.count() == 1 and not Proposal.objects.exists()

    on = owner_client.post("/settings/chat/", {"confirm_chat_schedules": "on"})
    assert on.status_code == 302 and on["Location"] == "/settings/"
    assert proposals.confirmation_on(owner.pk) is True
    assert owner_client.get("/settings/chat/").status_code == 405


def test_deleting_the_conversation_takes_its_proposals(owner, assistant):
    from runs import services as run_services

    run, _ = _proposed(owner, assistant)
    run_services.delete_conversation(Conversation.objects.get(pk=run.conversation_id))
    assert not Proposal.objects.exists()


def test_confirming_after_its_time_passed_says_it_cannot_be_created_any_more(owner, assistant):
    with time_machine.travel(THURSDAY_MORNING, tick=False):
        run = chat(owner, assistant, "on 2026-09-03 at 18:00 remind me to call the bank")
    proposal = Proposal.objects.get(run_id=run.pk)
    assert proposal.arguments["run_at"] == "2026-09-03T18:00:00+03:00"

    later = time_machine.travel(THURSDAY_MORNING + timedelta(hours=9, minutes=1), tick=False)
    with later, pytest.raises(proposals.ProposalInvalid, match="run_at must be in the future"):
        proposals.confirm(proposal.pk, owner)
    proposal.refresh_from_db()
    assert proposal.status == "open" and not Schedule.objects.exists()
