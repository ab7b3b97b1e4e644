"""Per-owner caps (docs/contract.md#schedules, amended): at most MAX_ACTIVE_SCHEDULES active schedules
per owner, and a schedule made in chat fires at most every CHAT_MIN_INTERVAL_MINUTES. A model could once
create `* * * * *` schedules, any number of them. Both caps have per-owner overrides in the admin; the
owner's own dashboard and API keep cron's one-minute granularity."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from accounting.models import OwnerBudget
from runs.models import Conversation
from schedules import services
from schedules.models import Schedule
from schedules.schemas import InvalidSchedule, parse_create, parse_update
from schedules.tools import CreateArguments, UpdateArguments, schedule_create, schedule_update
from tests.api.conftest import Api, error_of, token_for
from tests.concurrency import race
from tests.factories import chat_creates_at_once, make_assistant, make_schedule, running_run

pytestmark = pytest.mark.django_db


def _cap(owner, **values) -> None:
    OwnerBudget.objects.filter(owner=owner).update(**values)


def _body(agent, **extra):
    return {"title": "Digest", "prompt": "Summarise.", "agent": agent.name, "cron": "0 9 * * *", **extra}


def test_one_more_than_the_cap_is_refused_by_the_api_with_schedule_limit(owner, agent, settings):
    settings.MAX_ACTIVE_SCHEDULES = 3
    api = Api(token_for(owner, "read", "write"))
    for _ in range(3):
        assert api.post("/schedules", {**_body(agent), "timezone": "UTC"}).status_code == 201
    refused = api.post("/schedules", {**_body(agent), "timezone": "UTC"})
    assert refused.status_code == 409
    assert (
        error_of(refused)["code"] == "schedule_limit" and "3 active schedules" in error_of(refused)["message"]
    )
    assert Schedule.objects.filter(owner=owner).count() == 3


def test_paused_and_completed_schedules_do_not_count(owner, agent, settings):
    settings.MAX_ACTIVE_SCHEDULES = 2
    first = make_schedule(owner, agent)
    make_schedule(owner, agent)
    services.pause_schedule(first, by=owner)
    make_schedule(owner, agent)  # room again: only two are active
    with pytest.raises(services.ScheduleLimit):
        services.resume_schedule(first, by=owner)  # resuming would make three
    first.refresh_from_db()
    assert first.status == Schedule.Status.PAUSED


def test_the_form_says_so_in_words(owner_client, owner, agent, settings):
    settings.MAX_ACTIVE_SCHEDULES = 1
    make_schedule(owner, agent)
    response = owner_client.post("/schedules/new/", {**_body(agent), "kind": "recurring", "timezone": "UTC"})
    assert response.status_code == 200
    assert "You already have 1 active schedule, the most you may have at once" in response.text
    assert Schedule.objects.filter(owner=owner).count() == 1


def test_resume_on_the_dashboard_says_why_it_did_not(owner_client, owner, agent, settings):
    settings.MAX_ACTIVE_SCHEDULES = 1
    paused = make_schedule(owner, agent)
    services.pause_schedule(paused, by=owner)
    make_schedule(owner, agent)
    response = owner_client.post(f"/schedules/{paused.pk}/resume/", headers={"HX-Request": "true"})
    assert response.status_code == 200 and "Not resumed" in response.text
    paused.refresh_from_db()
    assert paused.status == Schedule.Status.PAUSED


def test_an_admin_override_raises_or_lowers_one_owners_cap(owner, other_owner, agent, settings):
    settings.MAX_ACTIVE_SCHEDULES = 1
    _cap(owner, max_active_schedules=3)
    for _ in range(3):
        make_schedule(owner, agent)
    with pytest.raises(services.ScheduleLimit):
        make_schedule(owner, agent)
    make_schedule(other_owner, agent)
    with pytest.raises(services.ScheduleLimit):
        make_schedule(other_owner, agent)  # the setting still applies to everyone else


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_creations_at_the_last_free_place_make_one(owner, agent, settings):
    settings.MAX_ACTIVE_SCHEDULES = 5
    for _ in range(4):
        make_schedule(owner, agent)
    results = race([lambda: make_schedule(owner, agent)] * 20)
    created = [r for r in results if isinstance(r, Schedule)]
    refused = [r for r in results if isinstance(r, services.ScheduleLimit)]
    assert len(created) == 1 and len(refused) == 19, results
    assert Schedule.objects.filter(owner=owner, status="active").count() == 5


# -- chat -----------------------------------------------------------------------------------------


@pytest.fixture
def context(owner):
    from runs.tools import ToolContext

    assistant = make_assistant()
    chat_creates_at_once(owner)  # created at once; proposals are checked alike (test_proposals.py)
    conversation = Conversation.objects.create(owner=owner, agent=assistant, title="Chat")
    run = running_run(owner, assistant, conversation=conversation)
    return ToolContext(run=run, agent=assistant, http=None, delegate=None)  # type: ignore[arg-type]


def _create(context, cron: str) -> str:
    return schedule_create(
        CreateArguments(title="News", prompt="Brief me.", cron=cron, timezone="Europe/Riga"), context
    )


@pytest.mark.parametrize(
    ("cron", "fires"),
    [("* * * * *", "every minute"), ("*/5 * * * *", "every 5 minutes"), ("0,10 9 * * *", "every 10 minutes")],
)
def test_chat_may_not_create_a_schedule_firing_more_often_than_the_minimum(context, cron, fires):
    from runs.tools import ToolError

    with pytest.raises(ToolError) as refused:
        _create(context, cron)
    assert "at most every 15 minutes" in str(refused.value) and fires in str(refused.value)
    assert not Schedule.objects.exists()


def test_chat_may_create_one_at_the_minimum_and_beyond(context):
    assert "Created schedule" in _create(context, "*/15 * * * *")
    assert "Created schedule" in _create(context, "0 9 * * 1-5")


def test_chat_may_not_move_a_schedule_to_fire_more_often_either(context, owner):
    from runs.tools import ToolError

    _create(context, "0 9 * * *")
    schedule = Schedule.objects.get()
    with pytest.raises(ToolError, match="at most every 15 minutes"):
        schedule_update(UpdateArguments(schedule_id=schedule.pk, cron="*/2 * * * *"), context)


def test_the_owners_own_interval_applies_in_chat(context, owner):
    from runs.tools import ToolError

    _cap(owner, chat_min_interval_minutes=60)
    with pytest.raises(ToolError, match="at most every 60 minutes"):
        _create(context, "*/30 * * * *")
    assert "Created schedule" in _create(context, "0 * * * *")


def test_chat_is_told_in_words_when_the_owner_has_no_room(context, owner, settings):
    from runs.tools import ToolError

    settings.MAX_ACTIVE_SCHEDULES = 1
    _create(context, "0 9 * * *")
    with pytest.raises(ToolError, match="1 active schedule, the most you may have"):
        _create(context, "0 18 * * *")


def test_the_owners_own_dashboard_and_api_keep_one_minute_granularity(owner, agent):
    api = Api(token_for(owner, "read", "write"))
    response = api.post("/schedules", {**_body(agent), "cron": "* * * * *", "timezone": "UTC"})
    assert response.status_code == 201
    schedule = Schedule.objects.get()
    updated = services.update_schedule(
        schedule, parse_update({"cron": "*/2 * * * *"}), by=owner, via="dashboard"
    )
    assert updated.revision.cron == "*/2 * * * *"


def test_a_one_time_schedule_in_chat_has_no_interval(context):
    at = (timezone.now() + timedelta(days=1)).isoformat()
    result = schedule_create(CreateArguments(title="Remind", prompt="Renew the key.", run_at=at), context)
    assert "Created schedule" in result


def test_the_service_refuses_with_a_field_error_naming_cron(owner, agent):
    with pytest.raises(InvalidSchedule) as refused:
        services.create_schedule(
            owner, parse_create({**_body(agent), "cron": "*/5 * * * *", "timezone": "UTC"}), via="chat"
        )
    assert set(refused.value.fields) == {"cron"}
