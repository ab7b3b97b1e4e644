"""Quieter notices (SPEC 12, last bullet): completion notices may be told only when the answer
changed from the schedule's previous completed run, and the same self-pause of one schedule told
within a day is not told again. What the owner notices: Notice rows, and the emails the minute
`notify` task sends."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from runs.failures import Outcome, WorkerLost
from runs.models import Run
from runs.services import finish_run
from schedules import notices, services, tasks
from schedules.models import Notice, NotificationAttempt, Schedule
from tests.factories import fail, make_schedule, materialize

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(owner):
    owner.email = "olga@example.com"
    owner.save()
    return owner


def _choose(owner, *, email=True, only_changed=False):
    notices.completed.update_completion_settings(
        owner,
        completion_email=email,
        completion_webhook=False,
        webhook_content=False,
        completion_only_changed=only_changed,
    )


def _complete_with(schedule: Schedule, answers: list[str]) -> list[Run]:
    """One completed run per answer, each occurrence an hour after the previous one."""
    start = timezone.now() - timedelta(hours=len(answers) + 1)
    runs = []
    for hour, answer in enumerate(answers):
        occurrence = materialize(schedule, scheduled_for=start + timedelta(hours=hour))
        run = Run.objects.get(pk=occurrence.run_id)
        assert finish_run(run, Outcome(status="completed", answer=answer), attempt=run.attempt)
        runs.append(run)
    return runs


def _told_runs() -> list[int]:
    return list(
        Notice.objects.filter(kind="completed").order_by("created_at", "id").values_list("run_id", flat=True)
    )


# -- only when the answer changed -----------------------------------------------------------------


def test_only_changed_tells_the_same_answer_once_and_a_changed_answer_again(owner, agent, mailoutbox):
    _choose(owner, only_changed=True)
    schedule = make_schedule(owner, agent, title="Rates watch")
    first, same, changed = _complete_with(
        schedule, ["Rates held at 4%.", "  Rates held at 4%.\n", "Rates cut."]
    )

    assert _told_runs() == [first.pk, changed.pk]  # the repeat (whitespace aside) wrote nothing
    tasks.notify()
    assert [m.subject for m in mailoutbox] == ["Completed: Rates watch", "Completed: Rates watch"]
    assert "Rates held at 4%." in mailoutbox[0].body and "Rates cut." in mailoutbox[1].body
    assert not NotificationAttempt.objects.filter(notice__run_id=same.pk).exists()


def test_only_changed_still_tells_a_schedules_first_completed_run(owner, agent, mailoutbox):
    _choose(owner, only_changed=True)
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))  # a failed run has no answer to compare with
    (run,) = _complete_with(schedule, ["done"])

    assert _told_runs() == [run.pk]
    tasks.notify()
    assert len(mailoutbox) == 1


def test_only_changed_compares_with_the_previous_completed_run_not_a_failure_in_between(owner, agent):
    _choose(owner, only_changed=True)
    schedule = make_schedule(owner, agent)
    (first,) = _complete_with(schedule, ["Quiet day."])
    fail(materialize(schedule, scheduled_for=timezone.now()))
    occurrence = materialize(schedule, scheduled_for=timezone.now() + timedelta(minutes=1))
    run = Run.objects.get(pk=occurrence.run_id)
    finish_run(run, Outcome(status="completed", answer="Quiet day."), attempt=run.attempt)

    assert _told_runs() == [first.pk]


def test_only_changed_compares_within_one_schedule(owner, agent):
    _choose(owner, only_changed=True)
    (one,) = _complete_with(make_schedule(owner, agent, title="One"), ["Same words."])
    (two,) = _complete_with(make_schedule(owner, agent, title="Two"), ["Same words."])

    assert sorted(_told_runs()) == sorted([one.pk, two.pk])


def test_with_the_setting_off_every_completed_run_tells(owner, agent, mailoutbox):
    _choose(owner, only_changed=False)
    schedule = make_schedule(owner, agent)
    runs = _complete_with(schedule, ["Same words.", "Same words."])

    assert _told_runs() == [r.pk for r in runs]
    tasks.notify()
    assert len(mailoutbox) == 2


def test_a_schedule_set_to_always_tell_still_tells_only_a_changed_answer(owner, agent, mailoutbox):
    _choose(owner, email=False, only_changed=True)  # no completion channel: the pause channels are used
    schedule = make_schedule(owner, agent, title="Loud")
    notices.completed.set_schedule_completion_notices(schedule, True)
    first, _ = _complete_with(schedule, ["Same words.", "Same words."])

    assert _told_runs() == [first.pk]
    tasks.notify()
    assert [m.subject for m in mailoutbox] == ["Completed: Loud"]


# -- the settings page -------------------------------------------------------------------------


def _only_changed_box(page: str) -> str:
    (box,) = re.findall(r'<input[^>]*name="completion_only_changed"[^>]*>', page)
    return box


def test_the_settings_page_saves_only_changed_and_shows_it_checked(owner, owner_client):
    page = owner_client.get("/settings/").text
    assert "Only when the answer changed from the schedule&#x27;s previous run" in page
    assert "this chooses how often" in page
    assert "checked" not in _only_changed_box(page)

    response = owner_client.post(
        "/settings/completions/", {"completion_email": "on", "completion_only_changed": "on"}, follow=True
    )
    assert "Completion notices are on, only when the answer changed." in response.text
    assert "checked" in _only_changed_box(response.text)
    channels = notices.settings_for(owner.pk)
    assert (channels.completion_email, channels.completion_only_changed) == (True, True)

    owner_client.post("/settings/completions/", {"completion_email": "on"})
    assert notices.settings_for(owner.pk).completion_only_changed is False
    assert "checked" not in _only_changed_box(owner_client.get("/settings/").text)


# -- identical pause notices fold within a day ------------------------------------------------------


def _trip(owner, agent) -> Schedule:
    schedule = make_schedule(owner, agent)
    fail(materialize(schedule))
    fail(materialize(schedule))
    schedule.refresh_from_db()
    assert schedule.status == "paused"
    return schedule


def _resume_and_fail_at(schedule: Schedule, owner, when: datetime, failure=None) -> None:
    """The owner resumes at `when`; the next run fails at once and pauses it again (the count is kept)."""
    with time_machine.travel(when, tick=False):
        services.resume_schedule(schedule, by=owner)
        fail(materialize(schedule, scheduled_for=when), failure)
    schedule.refresh_from_db()
    assert schedule.status == "paused"


def test_the_same_pause_twice_within_a_day_is_told_once(owner, agent, mailoutbox):
    schedule = _trip(owner, agent)
    _resume_and_fail_at(schedule, owner, timezone.now() + timedelta(hours=3))

    assert schedule.pause_events.filter(action="pause").count() == 2
    assert Notice.objects.filter(kind="paused").count() == 1
    tasks.notify()
    assert [m.subject for m in mailoutbox] == ["Paused: Morning briefing"]


def test_the_same_pause_25_hours_later_is_told_again(owner, agent, mailoutbox):
    schedule = _trip(owner, agent)
    tasks.notify()
    _resume_and_fail_at(schedule, owner, timezone.now() + timedelta(hours=25))
    tasks.notify()

    assert Notice.objects.filter(kind="paused").count() == 2
    assert [m.subject for m in mailoutbox] == ["Paused: Morning briefing"] * 2


def test_a_pause_tripped_by_a_different_failure_is_told_within_the_day(owner, agent, mailoutbox):
    schedule = _trip(owner, agent)  # budget exhausted, twice
    _resume_and_fail_at(schedule, owner, timezone.now() + timedelta(hours=1), WorkerLost("no heartbeat"))
    tasks.notify()

    assert Notice.objects.filter(kind="paused").count() == 2
    assert len(mailoutbox) == 2 and "worker lost" in mailoutbox[1].body


def test_a_different_reason_is_told_within_the_day(owner, agent, mailoutbox):
    schedule = _trip(owner, agent)
    with time_machine.travel(timezone.now() + timedelta(hours=1), tick=False):
        services.resume_schedule(schedule, by=owner)
        services.pause_for_invalid_definition(schedule, detail="its agent 'x' is retired")
    tasks.notify()

    assert Notice.objects.filter(kind="paused").count() == 2
    assert "could not be run as defined" in mailoutbox[1].body
