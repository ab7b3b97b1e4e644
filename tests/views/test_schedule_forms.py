"""New and edit schedule forms: the shared validators' words, the live preview, nothing written
when input is refused, and no limit fields on edit."""

from __future__ import annotations

import html
import re

import pytest
from django.utils import timezone

from schedules.models import Schedule, ScheduleRevision
from tests.factories import make_agent, make_schedule
from tests.views.conftest import HTMX

pytestmark = pytest.mark.django_db


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def _create(**overrides: str) -> dict[str, str]:
    data = {
        "title": "Morning briefing",
        "agent": "researcher",
        "prompt": "Research today's news.",
        "kind": "recurring",
        "cron": "daily at 09:00",
        "timezone": "Europe/Riga",
        "run_at": "",
    }
    data.update(overrides)
    return data


def test_the_new_form_previews_the_limits_schedule_create_will_pin(owner_client, agent):
    response = owner_client.get("/schedules/new/")
    text = _text(response.text)
    assert response.status_code == 200
    assert "Limits this schedule will pin" in text
    assert "Steps 10 2 Model calls 10 2 Tool calls 6 none Cost USD 5.00 USD 1.00" in text
    assert "Failure limit 2 failed runs in a row" in text


def test_the_live_preview_follows_the_chosen_agent(owner_client, agent):
    make_agent("cheap", cost_limit="0.80")
    response = owner_client.get("/schedules/new/preview/?agent=cheap", headers=HTMX)
    text = _text(response.text)
    assert response.text.lstrip().startswith('<section id="limits-preview"')
    assert "Cost USD 0.80 none" in text  # the USD 1 reserve is omitted: not below the total


def test_without_javascript_show_its_limits_keeps_a_long_prompt_and_creates_nothing(
    owner, owner_client, agent
):
    """The button posts: a prompt longer than any address a server takes (4,094 bytes) comes back
    as typed, with the other agent's limits."""
    make_agent("cheap", cost_limit="0.80")
    prompt = "Collect the papers of the week on retrieval and say what changed. " * 80
    response = owner_client.post("/schedules/new/", {**_create(agent="cheap", prompt=prompt), "preview": "1"})
    assert response.status_code == 200 and len(prompt) > 4094
    assert prompt.strip() in response.text and "Cost USD 0.80 none" in _text(response.text)
    assert "Nothing was saved" not in response.text  # a preview, not a failed save
    assert not Schedule.objects.filter(owner=owner).exists()


def test_creating_a_schedule_goes_through_the_policy(owner, owner_client, agent):
    response = owner_client.post("/schedules/new/", _create())
    schedule = Schedule.objects.get(owner=owner)
    assert response.status_code == 302 and response["Location"] == f"/schedules/{schedule.pk}/"
    revision = schedule.revision
    assert (revision.number, revision.path, revision.via, revision.cron) == (
        1,
        "schedule.create",
        "dashboard",
        "0 9 * * *",
    )
    assert revision.limits["max_cost"] == "5.00" and revision.limits["synthesis_reserve_cost"] == "1.00"
    assert revision.max_consecutive_failures == 2


def test_an_htmx_create_redirects_the_client(owner, owner_client, agent):
    response = owner_client.post("/schedules/new/", _create(), headers=HTMX)
    schedule = Schedule.objects.get(owner=owner)
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"/schedules/{schedule.pk}/"


def test_a_one_time_schedule_reads_its_time_in_the_chosen_zone(owner, owner_client, agent):
    year = timezone.now().year + 1
    owner_client.post("/schedules/new/", _create(kind="one_time", cron="", run_at=f"{year}-03-01T09:30"))
    revision = Schedule.objects.get(owner=owner).revision
    assert revision.run_at is not None and revision.cron == ""
    assert revision.run_at.isoformat() == f"{year}-03-01T07:30:00+00:00"  # EET, winter


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"title": ""}, "title", "title is required"),
        ({"cron": "every blue moon"}, "cron", "cron needs five fields"),
        ({"timezone": "Mars/Olympus"}, "timezone", "'Mars/Olympus' is not an IANA time zone"),
        ({"agent": "nobody"}, "agent", "there is no active agent named 'nobody'"),
        (
            {"kind": "one_time", "cron": "", "run_at": "2001-01-01T09:00"},
            "run_at",
            "run_at must be in the future",
        ),
    ],
)
def test_bad_input_rerenders_with_the_field_error_and_writes_nothing(
    owner_client, agent, overrides, field, message
):
    response = owner_client.post("/schedules/new/", _create(**overrides))
    assert response.status_code == 200
    assert message in html.unescape(response.text)
    assert f'class="field field--{field} field--invalid"' in response.text or field == "agent"
    assert "Nothing was saved" in response.text
    assert Schedule.objects.count() == 0


def test_an_htmx_invalid_create_returns_the_form_fragment(owner_client, agent):
    response = owner_client.post("/schedules/new/", _create(title=""), headers=HTMX)
    assert response.text.lstrip().startswith('<div id="schedule-form"')
    assert "title is required" in response.text


def test_edit_offers_no_limit_fields_and_says_why(owner, owner_client, agent):
    schedule = make_schedule(owner, agent)
    html = owner_client.get(f"/schedules/{schedule.pk}/edit/").text
    for name in ("max_cost", "max_steps", "synthesis_reserve_cost", "max_consecutive_failures"):
        assert f'name="{name}"' not in html
    assert "they change only through an explicit revision by an admin" in html


def test_edit_writes_a_schedule_update_revision_that_copies_the_limits(owner, owner_client, agent):
    schedule = make_schedule(owner, agent)
    response = owner_client.post(
        f"/schedules/{schedule.pk}/edit/",
        {
            "title": "Evening briefing",
            "prompt": "Summarize.",
            "cron": "0 19 * * *",
            "timezone": "Europe/Riga",
        },
    )
    assert response.status_code == 302
    revision = ScheduleRevision.objects.filter(schedule=schedule).latest("number")
    assert (revision.number, revision.path, revision.via, revision.title, revision.cron) == (
        2,
        "schedule.update",
        "dashboard",
        "Evening briefing",
        "0 19 * * *",
    )
    assert revision.limits == schedule.revision.limits


def test_posting_a_limit_field_to_edit_is_refused_in_the_shared_words(owner, owner_client, agent):
    schedule = make_schedule(owner, agent)
    response = owner_client.post(
        f"/schedules/{schedule.pk}/edit/",
        {"title": "x", "prompt": "y", "cron": "0 9 * * *", "timezone": "Europe/Riga", "max_cost": "50.00"},
    )
    assert response.status_code == 200
    assert "max_cost cannot be changed by schedule.update" in html.unescape(response.text)
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 1


def test_a_bad_cron_on_edit_is_a_field_error_and_nothing_is_written(owner, owner_client, agent):
    schedule = make_schedule(owner, agent)
    response = owner_client.post(
        f"/schedules/{schedule.pk}/edit/",
        {"title": "Briefing", "prompt": "y", "cron": "0 25 * * *", "timezone": "Europe/Riga"},
    )
    assert response.status_code == 200
    assert 'class="field field--cron field--invalid"' in response.text
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 1


def test_another_owners_schedule_cannot_be_edited(other_client, owner, agent):
    schedule = make_schedule(owner, agent)
    assert other_client.get(f"/schedules/{schedule.pk}/edit/").status_code == 404
    assert other_client.post(f"/schedules/{schedule.pk}/edit/", {"title": "mine"}).status_code == 404


def test_a_form_post_needs_the_csrf_token(csrf_client, agent):
    assert csrf_client.post("/schedules/new/", _create()).status_code == 403
    assert Schedule.objects.count() == 0
