"""Titles derived from people's text fit their columns by construction (runs.titles): a first
message that opens with many combining marks, and schedule titles at the column's limit in
scripts whose letters carry marks, once overflowed the column (a 500; a schedule paused
"internal error (DataError)" with its whole tick batch rolled back and retried one by one)."""

from __future__ import annotations

import logging
import unicodedata
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils.text import Truncator
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from accounting.models import OwnerBudget
from runs import titles
from runs.models import Conversation, Run
from schedules import execution
from schedules.models import Occurrence, Schedule
from schedules.schemas import InvalidSchedule, parse_create
from schedules.tasks import enqueue_occurrences
from tests.api.conftest import Api, token_for
from tests.factories import make_agent, make_schedule

pytestmark = pytest.mark.django_db

COLUMN = Conversation._meta.get_field("title").max_length
ZALGO = "e" + "\u0301" * 250  # one visible character, 251 code points

# A title of 200 code points in each of ten scripts whose letters carry marks or join (the form
# and the API accept 200 code points); each is far fewer visible characters.
UNIT = {
    "Thai": "ภาษาไทยที่มีสระและวรรณยุกต์ ",
    "Hebrew with points": "בְּרֵאשִׁית בָּרָא אֱלֹהִים ",
    "Devanagari": "हिन्दी समाचार सारांश ",
    "vowelled Arabic": "بِسْمِ ٱللَّٰهِ ٱلرَّحْمَٰنِ ",
    "Bengali": "বাংলা সংবাদ সারাংশ ",
    "Tamil": "தமிழ் செய்திச் சுருக்கம் ",
    "Vietnamese (combining)": "Tie\u0302\u0301ng Vie\u0323\u0302t ",
    "Korean jamo": "\u1112\u1161\u11ab\u1100\u1173\u11af ",
    "emoji ZWJ families": "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 news ",
    "Zalgo": "Z\u0351\u0350\u0302a\u0344\u0346l\u0352g\u0350o ",
}
TITLES = {script: (unit * 200)[:200] for script, unit in UNIT.items()}


def _visible(text: str) -> int:
    return sum(1 for char in text if not unicodedata.combining(char))


def test_a_first_message_of_combining_marks_starts_a_conversation(owner):
    api = Api(token_for(owner, "read", "write"))
    make_agent("helper")
    response = api.post("/conversations", {"agent": "helper", "message": ZALGO})
    assert response.status_code == 201
    title = Conversation.objects.get().title
    assert len(title) <= COLUMN and unicodedata.normalize("NFD", title).startswith("e\u0301")


def test_the_dashboards_new_conversation_takes_it_too(owner_client):
    make_agent("helper")
    response = owner_client.post("/conversations/new/", {"agent": "helper", "message": ZALGO})
    assert response.status_code == 302
    assert len(Conversation.objects.get().title) <= COLUMN


@pytest.mark.parametrize("script", list(TITLES))
def test_a_schedule_titled_to_the_limit_in_each_script_runs(owner, agent, script):
    title = TITLES[script]
    assert len(title) == 200 and _visible(title) <= 200
    schedule = make_schedule(owner, agent, title=title, cron="0 9 * * *", tz="Asia/Bangkok")
    due = schedule.next_occurrence_at
    report = execution.materialize_due(enqueue=enqueue_occurrences, now=due)
    schedule.refresh_from_db()
    assert schedule.status == Schedule.Status.ACTIVE and len(report.enqueued) == 1
    conversation = Conversation.objects.get(runs__pk=Occurrence.objects.get().run_id)
    assert len(conversation.title) <= COLUMN and conversation.title.endswith(f"{due:%Y}")


def test_one_batch_holds_every_script_and_is_never_retried_one_by_one(owner, agent, caplog):
    due = datetime(2026, 9, 3, 2, 0, tzinfo=UTC)  # 09:00 in Bangkok
    before = due - timedelta(hours=1)
    OwnerBudget.objects.filter(owner=owner).update(daily_ceiling=Decimal("100.00"))  # room for all
    made = [
        make_schedule(owner, agent, title=title, cron="0 9 * * *", tz="Asia/Bangkok", now=before)
        for title in [*TITLES.values(), "Plain"]
    ]
    with caplog.at_level(logging.ERROR, logger="schedules.execution"):
        report = execution.materialize_due(enqueue=enqueue_occurrences, now=due)
    assert len(report.enqueued) == len(made) and report.paused == []
    assert "one by one" not in caplog.text  # the batch was written whole, in one statement
    assert Run.objects.count() == len(made)
    assert all(len(c.title) <= COLUMN for c in Conversation.objects.all())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(title=st.text(min_size=1, max_size=200), day=st.dates(min_value=datetime(2026, 1, 1).date()))
def test_any_title_the_schedule_form_accepts_yields_an_occurrence_title_that_fits(title, day):
    try:
        parse_create({"title": title, "prompt": "p", "agent": "a", "cron": "0 9 * * *", "timezone": "UTC"})
    except InvalidSchedule:
        return  # refused where it is typed: never stored
    revision = type("Revision", (), {"title": title, "timezone": "Pacific/Kiritimati"})()
    derived = execution._conversation_title(revision, datetime.combine(day, datetime.min.time(), tzinfo=UTC))
    assert len(derived) <= COLUMN


@given(text=st.text(max_size=600), limit=st.integers(min_value=2, max_value=300))
@example(text="0\u03000", limit=2)  # a first cluster ("0" and its accent) longer than the room left
def test_fit_never_exceeds_its_limit_and_never_starts_a_kept_cluster_it_cut(text, limit):
    fitted = titles.fit(text, limit)
    assert len(fitted) <= limit
    if fitted != text:
        kept = fitted.removesuffix(titles.ELLIPSIS)
        assert text.startswith(kept)
        rest = text[len(kept) :].lstrip()
        # What was cut away does not begin with a mark that belonged to the last kept letter,
        # unless the text's first cluster alone is longer than the room: what fits of it is kept.
        first_cluster = next(
            (
                i
                for i in range(1, len(text))
                if not titles._continues_cluster(text[i]) and text[i - 1] not in titles._JOINERS
            ),
            len(text),
        )
        assert not rest or not titles._continues_cluster(rest[0]) or first_cluster > len(kept)


def test_shortened_counts_visible_characters_for_display_and_code_points_for_the_column():
    assert titles.shortened("a" * 100, shown=80, limit=200) == Truncator("a" * 100).chars(80)
    assert len(titles.shortened(ZALGO * 3, shown=80, limit=200)) <= 200
