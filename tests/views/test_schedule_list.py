"""The schedules list: tabs with counts, paused first, words for every state, constant queries."""

from __future__ import annotations

import html
import re
import zoneinfo

import pytest

from schedules import services
from schedules.models import Schedule
from tests.factories import fail, finish, make_schedule, materialize
from tests.views.conftest import HTMX, overloaded, spend_on

pytestmark = pytest.mark.django_db


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_a_row_says_cadence_status_streak_classification_and_cost(owner_client, paused_after_two_failures):
    response = owner_client.get("/")
    assert response.status_code == 200
    text = _text(response.text)
    assert "Morning briefing Every day at 09:00, Europe/Riga" in text
    assert "Paused · failure limit" in text
    assert "2 of 2 failures" in text
    assert (
        "Failed The AI provider was overloaded — usually temporary. provider error 529 overloaded_error"
        in text
    )
    assert "USD 0.60" in text
    assert "Not until resumed" in text


def test_tabs_count_each_status_and_paused_rows_come_first(
    owner, owner_client, agent, paused_after_two_failures
):
    active = make_schedule(owner, agent, title="Aardvark digest")
    finish(materialize(active))
    text = _text(owner_client.get("/").text)
    assert "All 2 Paused 1 Active 1 Completed 0" in text
    assert text.index("Morning briefing") < text.index("Aardvark digest")
    assert "0 of 2 failures" in text and "Completed" in text


def test_the_next_run_is_in_the_owners_zone_with_the_zone_named(owner, owner_client, agent):
    schedule = make_schedule(owner, agent, title="Riga briefing")
    local = schedule.next_occurrence_at.astimezone(zoneinfo.ZoneInfo("Europe/Riga"))
    text = _text(owner_client.get("/").text)
    assert f"{local:%H:%M} {local.tzname()}" in text
    assert "Times are shown in Europe/Riga." in text


def test_a_tab_filters_and_search_finds_by_title(owner, owner_client, agent, paused_after_two_failures):
    make_schedule(owner, agent, title="Evening summary")
    paused = _text(owner_client.get("/?status=paused").text)
    assert "Morning briefing" in paused and "Evening summary" not in paused
    found = _text(owner_client.get("/?q=evening").text)
    assert "Evening summary" in found and "Morning briefing" not in found
    assert "All 1 Paused 0 Active 1" in found


def test_htmx_search_returns_only_the_results_fragment(owner_client, paused_after_two_failures):
    response = owner_client.get("/?q=morning", headers=HTMX)
    assert response.status_code == 200
    assert response.text.lstrip().startswith('<div id="results"')
    assert "<html" not in response.text
    assert "HX-Request" in response["Vary"]


def test_empty_states_say_what_to_do_next(owner, owner_client, agent):
    assert "Create your first schedule" in owner_client.get("/").text
    make_schedule(owner, agent)
    assert "Nothing is paused" in owner_client.get("/?status=paused").text
    assert "No schedules match “zzz”" in owner_client.get("/?q=zzz").text


def _link(page: str, rel: str) -> str:
    found = re.search(rf'rel="{rel}" href="([^"]+)"', page)
    assert found, f"no {rel} link"
    return html.unescape(found.group(1))


def test_pages_of_25_from_a_keyset_cursor_with_next_and_previous(owner, owner_client, agent):
    for number in range(30):
        make_schedule(owner, agent, title=f"Briefing {number:02d}")
    services.pause_schedule(Schedule.objects.get(title="Briefing 29"), by=owner)  # paused come first
    first_page = owner_client.get("/").text
    first = _text(first_page)
    assert "1\u201325 of 30" in first and "Briefing 29" in first and "Briefing 24" not in first
    assert 'rel="prev"' not in first_page
    second_page = owner_client.get("/" + _link(first_page, "next")).text
    second = _text(second_page)
    assert "26\u201330 of 30" in second and "Briefing 24" in second and "Briefing 28" in second
    assert "Briefing 29" not in second and 'rel="next"' not in second_page
    back = _text(owner_client.get("/" + _link(second_page, "prev")).text)
    assert "1\u201325 of 30" in back and "Briefing 00" in back and "Briefing 29" in back


def test_a_schedule_added_meanwhile_does_not_shift_the_next_page(owner, owner_client, agent):
    for number in range(30):
        make_schedule(owner, agent, title=f"Briefing {number:02d}")
    next_link = _link(owner_client.get("/").text, "next")
    make_schedule(owner, agent, title="Briefing 00a")  # sorts into the first page
    second = _text(owner_client.get("/" + next_link).text)
    assert "Briefing 25" in second and "Briefing 24" not in second


@pytest.mark.parametrize("cursor", ["junk", "%00", "x" * 2000, "WyJwYXVzZWQiLDEsMl0"])
def test_a_cursor_that_was_not_ours_is_the_first_page(owner, owner_client, agent, cursor):
    make_schedule(owner, agent, title="Briefing")
    response = owner_client.get(f"/?after={cursor}&start=-3")
    assert (response.status_code in (200, 400) and "Briefing" in response.text) or response.status_code == 400


def test_another_owners_schedules_never_show(other_client, paused_after_two_failures):
    text = _text(other_client.get("/").text)
    assert "Morning briefing" not in text
    assert "All 0" in text


def test_the_list_costs_a_fixed_number_of_queries(owner, owner_client, agent, django_assert_max_num_queries):
    for number in range(30):
        schedule = make_schedule(owner, agent, title=f"Briefing {number:02d}")
        run = fail(materialize(schedule), overloaded()) if number % 2 else finish(materialize(schedule))
        spend_on(run, "0.10", schedule_id=schedule.pk)
        if number % 3 == 0:
            services.pause_schedule(schedule, by=owner)
    assert Schedule.objects.filter(status="paused").count() == 10
    with django_assert_max_num_queries(12):
        response = owner_client.get("/")
    assert response.text.count("<tr>") == 26  # header + 25 rows
    next_link = _link(owner_client.get("/?q=briefing").text, "next")
    with django_assert_max_num_queries(12):
        owner_client.get("/" + next_link)


def test_anonymous_visitors_are_sent_to_sign_in(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_an_htmx_history_restore_gets_the_whole_page(owner_client, paused_after_two_failures):
    response = owner_client.get("/?q=morning", headers={**HTMX, "HX-History-Restore-Request": "true"})
    assert "<html" in response.text
