"""The owner's request for new limits on the dashboard, and its queue, review and decision in the
admin: prefilled from the recent runs, replayed against them, one request at a time."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from schedules import services
from schedules.models import RevisionRequest, RevisionRequestEvent, Schedule, ScheduleRevision
from schedules.schemas import parse_revision_request
from tests.factories import limits, make_budget_paused, make_schedule, make_user
from tests.views.conftest import HTMX

pytestmark = pytest.mark.django_db


def _text(page: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html.unescape(page)).split())


@pytest.fixture
def paused(owner, admin_user) -> Schedule:
    return make_budget_paused(owner, admin_user)


@pytest.fixture
def admin_client(admin_user: User) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def form(**changes: str) -> dict[str, str]:
    values = {
        **{
            name: str(value)
            for name, value in limits(max_cost="2.00", synthesis_reserve_cost="1.00").to_json().items()
        },
        "synthesis_reserve_steps": "2",
        "synthesis_reserve_model_calls": "2",
        "max_consecutive_failures": "2",
        "reason": "Each run uses its whole USD 1.00 and stops before answering.",
    }
    return {**values, **changes}


def url(schedule: Schedule) -> str:
    return f"/schedules/{schedule.pk}/request-limits/"


def open_request(schedule: Schedule) -> RevisionRequest:
    body = {
        "limits": limits(max_cost="2.00", synthesis_reserve_cost="1.00").to_json(),
        "max_consecutive_failures": 2,
        "reason": "Runs cost USD 1.20.",
    }
    return services.request_revision(schedule, parse_revision_request(body), by=schedule.owner, via="test")


# -- the schedule page -----------------------------------------------------------------------------


def test_a_budget_paused_schedule_says_resume_will_not_help_and_offers_the_request(owner_client, paused):
    page = owner_client.get(f"/schedules/{paused.pk}/").text
    panel = _text(page.split('<section id="status"', 1)[1].split("</section>", 1)[0])
    assert "The run used its whole USD 1.00 budget before answering." in panel
    assert re.search(
        r"Resuming will not help: the last 2 runs cost USD 0\.99\d* and USD 0\.99\d* and ran out of "
        r"the limit of USD 1\.00 per run",
        panel,
    )
    assert (
        f'<a class="button button--primary" href="/schedules/{paused.pk}/request-limits/">'
        "Request a bigger budget</a>" in page
    )
    # Resume stays, as a secondary action, still saying the count is kept.
    assert '<button type="submit" class="button" aria-describedby="resume-note-' in page


@pytest.mark.parametrize(
    ("model", "what", "change"),
    [
        (
            "sim-quota",
            "The provider account is out of quota or hit its spend limit",
            "Resuming will not help until the provider account is topped up or its spend limit raised.",
        ),
        (
            "sim-bad-param",
            "The provider refused the request as invalid",
            "Resuming will not help until the prompt or the agent's settings change.",
        ),
    ],
)
def test_a_permanent_provider_error_says_on_the_page_what_must_change_first(
    owner, owner_client, model, what, change
):
    from tests.factories import make_agent, run_due

    schedule = make_schedule(owner, make_agent(model, model=model))
    run_due(schedule)
    run_due(schedule)
    page = owner_client.get(f"/schedules/{schedule.pk}/").text
    panel = _text(page.split('<section id="status"', 1)[1].split("</section>", 1)[0])
    assert what in panel and "it will fail again until" in panel
    assert change in panel
    assert "HTTP" in panel  # the identifiers follow, in the quieter line
    assert panel.index(what) < panel.index("HTTP")


def test_an_open_request_is_shown_on_the_page_instead_of_the_button(owner_client, paused):
    open_request(paused)
    page = owner_client.get(f"/schedules/{paused.pk}/").text
    assert "Request a bigger budget" not in page
    assert "is waiting for an admin; you are told when it is decided." in _text(page)
    requests = _text(page.split('id="requests"', 1)[1].split("</section>", 1)[0])
    assert "Open asked" in requests and "USD 2.00 per run (reserve USD 1.00)" in requests


def test_an_active_schedule_with_a_kept_count_shows_one_warning_state(owner_client, paused):
    services.resume_schedule(paused, by=paused.owner)
    page = owner_client.get(f"/schedules/{paused.pk}/").text
    panel = page.split('<section id="status"', 1)[1].split("</section>", 1)[0]
    assert "panel--kept" in page.split('<section id="status"', 1)[1][:80]
    assert '<span class="badge badge--warn">' in panel and "2 of 2 failures kept" in panel
    assert 'class="streak' not in panel  # no green badge beside a red count
    assert "if the next run fails, the schedule pauses" in panel


# -- the request page ------------------------------------------------------------------------------


def test_the_request_page_is_prefilled_from_the_runs_and_replays_them(owner_client, paused):
    response = owner_client.get(url(paused))
    assert response.status_code == 200
    page = response.text
    assert 'name="max_cost" value="3.00"' in page and 'placeholder="1.00"' in page
    assert 'name="synthesis_reserve_cost" value="1.00"' in page
    text = _text(page)
    assert re.search(r"the most expensive cost USD 0\.99\d*, so USD 3\.00 per run", text)
    assert "An estimate from each run's recorded usage per step" in text
    assert "Goes on past step 2, where its record ends, with USD 2.00 of the budget left." in text
    assert "none would run out" in text


def test_checking_other_values_replays_them_without_javascript_and_as_a_fragment(owner_client, paused):
    plain = owner_client.post(
        url(paused), {**form(max_cost="1.10", synthesis_reserve_cost="0"), "check": "1"}
    )
    assert "Runs out of cost before step 3, with no answer." in _text(plain.text)
    assert 'name="max_cost" value="1.10"' in plain.text
    fragment = owner_client.post(
        url(paused), {**form(max_cost="3.00", synthesis_reserve_cost="0"), "check": "1"}, headers=HTMX
    )
    assert fragment.text.lstrip().startswith('<section id="replay"')
    assert "Goes on past step 2, where its record ends, with USD 2.00 of the budget left." in _text(
        fragment.text
    )
    assert "HX-Request" in fragment["Vary"]
    assert not RevisionRequest.objects.exists()


def test_a_check_with_a_reason_of_pages_replays_and_keeps_it_and_sends_nothing(owner_client, paused):
    """The page posts its checks: a reason longer than any address a server takes (4,094 bytes)
    is carried through the no-JavaScript check, not refused."""
    reason = "The briefings need more room to cite their sources. " * 100
    page = owner_client.post(
        url(paused), {**form(max_cost="1.10", synthesis_reserve_cost="0"), "reason": reason, "check": "1"}
    )
    assert page.status_code == 200 and len(reason) > 4094
    assert "Runs out of cost before step 3, with no answer." in _text(page.text)
    assert reason.strip() in page.text
    assert 'hx-post="' + url(paused) + '"' in owner_client.get(url(paused)).text  # the live check too
    assert not RevisionRequest.objects.exists()


def test_sending_writes_the_request_and_its_event_and_returns_to_the_schedule(owner_client, paused, owner):
    response = owner_client.post(url(paused), form(), follow=True)
    assert response.redirect_chain[-1][0] == f"/schedules/{paused.pk}/#requests"
    assert "Request sent. An admin decides; you are told when they do." in response.text
    asked = RevisionRequest.objects.get()
    assert (asked.state, asked.via, asked.requested_by_id, asked.limits["max_cost"]) == (
        "open",
        "dashboard",
        owner.pk,
        "2.00",
    )
    assert RevisionRequestEvent.objects.filter(request=asked, action="requested").count() == 1


def test_sending_twice_keeps_one_request_and_says_so(owner_client, paused):
    owner_client.post(url(paused), form())
    again = owner_client.post(url(paused), form(reason="Again"), follow=True)
    assert "You already have an open request for this schedule; nothing was sent." in again.text
    assert RevisionRequest.objects.count() == 1
    waiting = owner_client.get(url(paused)).text
    assert "Your request is waiting for an admin" in waiting and 'name="reason"' not in waiting


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"max_cost": "5_0"}, "max_cost must be written without separators (_ or ,)"),
        ({"synthesis_reserve_cost": "3.00"}, "synthesis_reserve_cost must be below max_cost (3.00 ≥ 2.00)"),
        ({"reason": ""}, "reason is required"),
        ({"max_steps": "ten"}, "max_steps must be a whole number"),
        ({"max_consecutive_failures": "0"}, "max_consecutive_failures must be at least 1"),
    ],
)
def test_bad_values_are_field_errors_and_nothing_is_sent(owner_client, paused, changes, error):
    response = owner_client.post(url(paused), form(**changes))
    assert response.status_code == 200
    assert error in html.unescape(response.text)
    assert "Nothing was sent." in response.text
    assert not RevisionRequest.objects.exists()


def test_another_owners_schedule_is_404(other_client, paused):
    assert other_client.get(url(paused)).status_code == 404
    assert other_client.post(url(paused), form()).status_code == 404
    assert not RevisionRequest.objects.exists()


def test_other_methods_are_405(owner_client, paused):
    assert owner_client.put(url(paused)).status_code == 405
    assert owner_client.delete(url(paused)).status_code == 405


def test_sending_needs_the_csrf_token(csrf_client, paused):
    assert csrf_client.post(url(paused), form()).status_code == 403
    assert not RevisionRequest.objects.exists()


def test_a_completed_schedule_needs_no_new_limits(owner_client, owner, agent):
    schedule = make_schedule(owner, agent)
    Schedule.objects.filter(pk=schedule.pk).update(status=Schedule.Status.COMPLETED)
    response = owner_client.get(url(schedule), follow=True)
    assert "A completed schedule runs no more" in response.text


# -- the admin -------------------------------------------------------------------------------------


def test_the_admin_queue_lists_open_requests_oldest_first(admin_client, owner, agent):
    first = open_request(make_schedule(owner, agent, title="First asked"))
    second = open_request(make_schedule(owner, agent, title="Second asked"))
    text = _text(admin_client.get("/admin/schedules/revisionrequest/").text)
    assert text.index("First asked") < text.index("Second asked")
    assert "USD 2.00 per run (reserve USD 1.00), 10 steps, failure limit 2" in text
    page = admin_client.get(f"/admin/schedules/revisionrequest/{first.pk}/change/").text
    assert f'/admin/schedules/schedule/{first.schedule_id}/pin/?request={first.pk}">Review and pin' in page
    assert f"/admin/schedules/revisionrequest/{first.pk}/decline/" in page
    assert 'name="_save"' not in page and "deletelink" not in page
    services.decline_request(second, parse_decline("No."), by=admin_client_user(admin_client), via="admin")
    assert "Second asked" not in _text(admin_client.get("/admin/schedules/revisionrequest/").text)
    assert "Second asked" in _text(admin_client.get("/admin/schedules/revisionrequest/?state=declined").text)


def admin_client_user(client: Client) -> User:
    return User.objects.get(pk=client.session["_auth_user_id"])


def parse_decline(reason: str):
    from schedules.schemas import parse_decline as parse

    return parse({"reason": reason})


def pin_url(asked: RevisionRequest) -> str:
    return f"/admin/schedules/schedule/{asked.schedule_id}/pin/?request={asked.pk}"


def pin_form(asked: RevisionRequest, **changes: str) -> dict[str, str]:
    return {**form(), "reason": "As asked", "base_revision": "2", "request": str(asked.pk), **changes}


def test_the_pin_page_is_prefilled_from_the_request_with_the_values_in_force_as_placeholders(
    admin_client, paused
):
    asked = open_request(paused)
    page = admin_client.get(pin_url(asked)).text
    assert 'name="max_cost" value="2.00"' in page and 'placeholder="1.00"' in page
    assert f'name="request" value="{asked.pk}"' in page
    assert (
        '<label for="id_synthesis_reserve_cost" class="required">Synthesis reserve — cost (USD)</label>'
        in page
    )
    assert '<label for="id_max_steps" class="required">Max steps</label>' in page
    text = _text(page)
    assert "Answering the request of olga" in text and "Runs cost USD 1.20." in text
    assert "Times are in UTC." in text


def test_the_review_shows_the_diff_and_the_replay_then_confirming_pins_and_decides(
    admin_client, paused, admin_user
):
    asked = open_request(paused)
    review = admin_client.post(pin_url(asked), pin_form(asked))
    text = _text(review.text)
    assert "Max cost (USD) USD 1.00 USD 2.00" in text
    assert "What these limits would have done" in text and "An estimate" in text
    assert "Told to write its answer at step 3: the cost reserve is reached." in text
    assert not ScheduleRevision.objects.filter(request=asked).exists()

    done = admin_client.post(pin_url(asked), {**pin_form(asked), "confirm": "1"}, follow=True)
    assert "Pinned revision 3 of “Weekly spend review”, answering the request of" in html.unescape(done.text)
    asked.refresh_from_db()
    revision = ScheduleRevision.objects.get(request=asked)
    assert (asked.state, asked.revision_id, revision.via, revision.created_by_id) == (
        "pinned",
        revision.pk,
        "admin",
        admin_user.pk,
    )
    again = admin_client.get(pin_url(asked), follow=True)
    assert "That request was already pinned." in again.text


def test_a_request_decided_meanwhile_pins_nothing_and_says_so(admin_client, paused, admin_user):
    asked = open_request(paused)
    admin_client.post(pin_url(asked), pin_form(asked))  # reviewed
    services.decline_request(asked, parse_decline("No."), by=admin_user, via="admin")  # elsewhere
    response = admin_client.post(pin_url(asked), {**pin_form(asked), "confirm": "1"}, follow=True)
    assert "That request was already declined." in response.text
    assert not ScheduleRevision.objects.filter(request=asked).exists()


def test_a_request_of_another_schedule_or_a_bad_id_is_404(admin_client, paused, owner, agent):
    asked = open_request(paused)
    other = make_schedule(owner, agent, title="Other")
    assert (
        admin_client.get(f"/admin/schedules/schedule/{other.pk}/pin/?request={asked.pk}").status_code == 404
    )
    assert admin_client.get(f"/admin/schedules/schedule/{paused.pk}/pin/?request=x1").status_code == 404
    assert (
        admin_client.get(f"/admin/schedules/schedule/{paused.pk}/pin/?request={'9' * 40}").status_code == 404
    )


def test_declining_in_the_admin_needs_a_reason_and_writes_one_decision(admin_client, paused):
    asked = open_request(paused)
    decline = f"/admin/schedules/revisionrequest/{asked.pk}/decline/"
    assert "Why it is declined" in admin_client.get(decline).text
    empty = admin_client.post(decline, {"reason": ""})
    assert "Nothing was declined." in empty.text and RevisionRequest.objects.get().state == "open"
    admin_client.post(decline, {"reason": "Shorten the prompt first."})
    again = admin_client.post(decline, {"reason": "Twice"}, follow=True)
    assert "That request was already declined." in again.text
    asked.refresh_from_db()
    assert (asked.state, asked.decline_reason) == ("declined", "Shorten the prompt first.")
    assert RevisionRequestEvent.objects.filter(action="declined").count() == 1


def test_staff_without_the_pin_permission_cannot_decide(paused):
    asked = open_request(paused)
    staff = make_user("sam", staff=True)
    staff.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_revisionrequest", "view_schedule"])
    )
    client = Client()
    client.force_login(User.objects.get(pk=staff.pk))
    page = client.get(f"/admin/schedules/revisionrequest/{asked.pk}/change/").text
    assert "Review and pin" not in page
    assert client.get(pin_url(asked)).status_code == 403
    assert (
        client.post(f"/admin/schedules/revisionrequest/{asked.pk}/decline/", {"reason": "x"}).status_code
        == 403
    )
    assert RevisionRequest.objects.get().state == "open"


def test_the_schedule_change_page_reads_like_the_dashboard(admin_client, paused):
    open_request(paused)
    page = admin_client.get(f"/admin/schedules/schedule/{paused.pk}/change/").text
    assert 'name="_save"' not in page and 'name="_continue"' not in page and "deletelink" not in page
    text = _text(page)
    assert "Paused failure limit · 2 of 2 failures · limits requested" in text
    assert "Steps 10 none" in text and "Cost USD 1.00 none" in text
    assert "Revision 2 in force" in text and "Revision 1" in text
    assert "Max cost (USD) USD 5.00 USD 1.00" in text  # revision 2 against revision 1
    assert "by ada · explicit via test" in text and "“Budget before the chat policy.”" in text
    assert " 4 revision 1" not in text
    assert re.search(r"\d{2}:\d{2} UTC", text)
    assert f"Agent and cadence: sim-expensive · {paused.revision.cadence}" in text
    assert paused.revision.prompt not in text  # the owner's content stays out of the admin
    asked = RevisionRequest.objects.get(schedule=paused)
    assert f'<a href="/admin/schedules/revisionrequest/{asked.pk}/change/">Review the request</a>' in page


def test_the_schedule_changelist_reads_in_a_few_columns_with_times_in_utc(admin_client, paused):
    text = _text(admin_client.get("/admin/schedules/schedule/").text)
    assert "Weekly spend review olga · recurring" in text
    assert "Paused failure limit · 2 of 2 failures" in text
    assert "budget exhausted" in text and "Next run (UTC)" in text


def test_a_huge_schedule_id_is_404_not_500(owner_client, admin_client):
    assert owner_client.get("/schedules/99999999999999999999999/request-limits/").status_code == 404
    assert (
        admin_client.get("/admin/schedules/revisionrequest/99999999999999999999999/decline/").status_code
        == 404
    )
