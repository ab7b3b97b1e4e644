"""Tools as the model uses them through the run loop: a tool's failure, an unknown tool or invalid
arguments become a tool result the model sees, never a crash; http.fetch keeps to its allow-list,
size cap and timeout; the schedule tools never let the agent set limits."""

from __future__ import annotations

import httpx
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounting.models import OwnerBudget
from runs.models import TranscriptEntry
from schedules.models import Schedule, ScheduleRevision
from tests.factories import chat_creates_at_once, limits, make_schedule, make_user
from tests.runs.wire import OPENAI, WIRES, Provider, execute, make_wire_agent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fetch_settings(settings):
    settings.HTTP_FETCH_ALLOWED_HOSTS = ["example.com", "news.example.org"]
    settings.HTTP_FETCH_MAX_BYTES = 2_000
    settings.HTTP_FETCH_TIMEOUT_SECONDS = 7


def _use(owner, wire, *calls, tools=("http.fetch", "clock.now"), web=None):
    """One turn asking for `calls`, then an answer. Returns the run, the tool results the model
    saw on its second request, and the provider."""
    provider = Provider(wire.tools(*calls), wire.answer(), web=web)
    run = execute(owner, make_wire_agent(wire, tools=list(tools)), provider, limits=limits(max_tool_calls=20))
    assert run.status == "completed", run.failure_message
    return run, wire.tool_results(provider.bodies[1]), provider


# -- the model's mistakes are tool errors ---------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_an_unknown_tool_is_a_tool_error_the_model_sees(owner, wire):
    run, seen, _ = _use(owner, wire, ("shell_exec", {"command": "rm -rf /"}))

    assert seen == [("Error: there is no tool named 'shell_exec' available to this agent.", True)]
    assert run.tool_calls == 1


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_a_registered_tool_the_agent_does_not_have_is_unknown_to_it(owner, wire):
    _, seen, _ = _use(owner, wire, ("schedule_create", {"title": "x"}), tools=["clock.now"])

    assert seen == [("Error: there is no tool named 'schedule_create' available to this agent.", True)]


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_an_unknown_tool_with_an_absurdly_long_name_is_still_just_a_tool_error(owner, wire):
    name = "lookup_" + "x" * 200
    run, seen, _ = _use(owner, wire, (name, {}))

    assert seen[0][1] is True and "there is no tool named" in seen[0][0]
    assert TranscriptEntry.objects.get(run=run, role="tool").is_error


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({}, "url is required"),
        ({"url": 42}, "url must be non-empty text"),
        ({"url": "https://example.com/", "method": "POST"}, "method is not a recognised field"),
        ({"url": "https://example.com/" + "a" * 2001}, "url must be at most 2000 characters"),
    ],
    ids=["missing", "wrong type", "unexpected field", "too long"],
)
def test_invalid_arguments_are_a_tool_error_naming_the_problem(owner, wire, arguments, problem):
    _, seen, provider = _use(owner, wire, ("http_fetch", arguments))

    assert seen == [(f"Error: invalid arguments for http.fetch: {problem}", True)]
    assert provider.fetches == []


def test_arguments_for_a_tool_without_arguments_are_refused(owner):
    _, seen, _ = _use(owner, OPENAI, ("clock_now", {"zone": "Mars"}))

    assert seen == [("Error: invalid arguments for clock.now: zone is not a recognised field", True)]


def test_clock_now_answers_in_the_owners_time_zone_read_with_the_first_call(owner):
    with CaptureQueriesContext(connection) as queries:
        _, seen, _ = _use(owner, OPENAI, ("clock_now", {}), ("clock_now", {}))

    assert seen[0][1] is False and "(Europe/Riga, " in seen[0][0]
    assert [result for result, _ in seen] == [seen[0][0]] * 2
    assert not [q for q in queries.captured_queries if q["sql"].startswith("SELECT timezone FROM")]


@pytest.mark.parametrize("stored", ["Not/A_Zone", "", None])
def test_clock_now_answers_in_the_default_zone_when_the_owner_has_none(owner, settings, stored):
    settings.DEFAULT_OWNER_TIME_ZONE = "Asia/Kathmandu"
    budgets = OwnerBudget.objects.filter(owner=owner)
    if stored is None:
        budgets.delete()  # made again at the run's admission, in the default zone
    else:
        budgets.update(timezone=stored)
    _, seen, _ = _use(owner, OPENAI, ("clock_now", {}))

    assert "(Asia/Kathmandu, " in seen[0][0]


def test_several_tool_calls_in_one_response_all_get_results_in_order(owner):
    _, seen, _ = _use(owner, OPENAI, ("clock_now", {}), ("no_such_tool", {}), ("clock_now", {}))

    assert [is_error for _, is_error in seen] == [False, True, False]


# -- http.fetch ---------------------------------------------------------------------------------


def _page(text: str = "<h1>Today</h1>", status: int = 200, **headers: str):
    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, text=text, headers=headers)

    return respond


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_http_fetch_returns_the_status_and_text_of_an_allowed_page(owner, wire):
    _, seen, provider = _use(
        owner, wire, ("http_fetch", {"url": "https://news.example.org/today?x=1"}), web=_page()
    )

    assert seen == [("HTTP 200\n<h1>Today</h1>", False)]
    assert [str(request.url) for request in provider.fetches] == ["https://news.example.org/today?x=1"]
    assert provider.fetches[0].method == "GET"


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example.net/",
        "https://example.com.evil.net/",
        "https://notexample.com/",
        "https://sub.example.com/",
        "http://169.254.169.254/latest/meta-data/",
    ],
)
def test_http_fetch_refuses_a_host_that_is_not_on_the_allow_list(owner, url):
    _, seen, provider = _use(owner, OPENAI, ("http_fetch", {"url": url}), web=_page())

    assert seen[0][1] is True and "is not on the allow-list" in seen[0][0]
    assert provider.fetches == []


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/x", "example.com/page", "https:///path"]
)
def test_http_fetch_refuses_anything_but_an_absolute_http_url(owner, url):
    _, seen, provider = _use(owner, OPENAI, ("http_fetch", {"url": url}), web=_page())

    assert seen == [("Error: url must be an absolute http(s) URL", True)]
    assert provider.fetches == []


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://example.com\t/", "non-printable"),
        ("https://example.com:abc/", "Invalid port"),
        ("https://\uff45xample.com/", "IDNA"),
        ("https://user:pw@example.com/", "user name or password"),
    ],
)
def test_an_unusable_fetch_url_is_an_error_result_and_the_run_goes_on(owner, url, problem):
    run, seen, provider = _use(owner, OPENAI, ("http_fetch", {"url": url}), web=_page())

    assert seen[0][1] is True and problem in seen[0][0]
    assert provider.fetches == []
    assert run.status == "completed"  # the model read the error and answered


def test_http_fetch_with_an_empty_allow_list_fetches_nothing(owner, settings):
    settings.HTTP_FETCH_ALLOWED_HOSTS = []
    _, seen, provider = _use(owner, OPENAI, ("http_fetch", {"url": "https://example.com/"}), web=_page())

    assert seen[0][1] is True and provider.fetches == []


class _Endless(httpx.SyncByteStream):
    """A body of 100 chunks of 1 kB that records how much of it was read."""

    def __init__(self) -> None:
        self.read = 0

    def __iter__(self):
        for _ in range(100):
            self.read += 1
            yield b"a" * 1000


def test_http_fetch_stops_reading_at_the_size_cap(owner):
    body = _Endless()
    _, seen, _ = _use(
        owner,
        OPENAI,
        ("http_fetch", {"url": "https://example.com/big"}),
        web=lambda request: httpx.Response(200, stream=body),
    )

    text, is_error = seen[0]
    assert not is_error
    assert text == "HTTP 200 (truncated)\n" + "a" * 2_000
    assert body.read <= 3


def test_http_fetch_asks_for_its_timeout(owner):
    _, _, provider = _use(owner, OPENAI, ("http_fetch", {"url": "https://example.com/"}), web=_page())

    assert provider.fetches[0].extensions["timeout"] == {"connect": 7, "read": 7, "write": 7, "pool": 7}


@pytest.mark.parametrize(
    "error",
    [httpx.ReadTimeout("timed out"), httpx.ConnectError("[Errno 111] Connection refused")],
    ids=["timeout", "connection refused"],
)
def test_a_failed_fetch_is_a_tool_error(owner, error):
    def fail(request):
        raise error

    _, seen, _ = _use(owner, OPENAI, ("http_fetch", {"url": "https://example.com/"}), web=fail)

    assert seen == [(f"Error: fetch failed: {type(error).__name__}", True)]


def test_http_fetch_does_not_follow_redirects(owner):
    redirect = _page("", 302, location="https://evil.example.net/")
    _, seen, provider = _use(owner, OPENAI, ("http_fetch", {"url": "https://example.com/"}), web=redirect)

    assert seen == [("HTTP 302\n", False)]
    assert len(provider.fetches) == 1


def test_a_page_with_nul_bytes_is_stored_in_the_transcript(owner):
    run, seen, _ = _use(owner, OPENAI, ("http_fetch", {"url": "https://example.com/"}), web=_page("a\x00b"))

    assert seen == [("HTTP 200\na\ufffdb", False)]
    assert TranscriptEntry.objects.get(run=run, role="tool").content == "HTTP 200\na\ufffdb"


# -- schedule.create and schedule.update ----------------------------------------------------------

SCHEDULE_TOOLS = ("schedule.create", "schedule.update")
NEW = {
    "title": "Morning briefing",
    "prompt": "Brief me on the news.",
    "cron": "0 9 * * *",
    "timezone": "Europe/Riga",
}


@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_schedule_create_pins_the_policy_limits(owner, wire):
    chat_creates_at_once(owner)  # without the owner's confirmation (tests/schedules/test_proposals.py)
    _, seen, _ = _use(owner, wire, ("schedule_create", NEW), tools=SCHEDULE_TOOLS)

    schedule = Schedule.objects.get(owner=owner)
    assert seen[0][1] is False and f"Created schedule {schedule.pk}" in seen[0][0]
    assert schedule.revision.limits["max_cost"] == "5.00"
    assert schedule.revision.limits["synthesis_reserve_cost"] == "1.00"
    assert schedule.revision.max_consecutive_failures == 2


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.parametrize(
    "extra",
    [
        {"max_cost": "50.00"},
        {"synthesis_reserve_cost": "0"},
        {"limits": {"max_steps": 100}},
        {"max_consecutive_failures": 100},
    ],
    ids=["max_cost", "a reserve", "a limits object", "the failure limit"],
)
def test_schedule_create_refuses_limits(owner, wire, extra):
    _, seen, _ = _use(owner, wire, ("schedule_create", {**NEW, **extra}), tools=SCHEDULE_TOOLS)

    (text, is_error), field = seen[0], next(iter(extra))
    assert is_error and text.startswith(f"Error: {field}") and "cannot be given" in text
    assert not Schedule.objects.exists()


@pytest.mark.parametrize("wire", WIRES, ids=str)
@pytest.mark.parametrize(
    "extra",
    [{"max_cost": "50.00"}, {"max_steps": 100}, {"limits": {}}, {"max_consecutive_failures": 100}],
    ids=["max_cost", "max_steps", "a limits object", "the failure limit"],
)
def test_schedule_update_refuses_limits_and_writes_no_revision(owner, wire, extra):
    schedule = make_schedule(owner, make_wire_agent(wire))
    arguments = {"schedule_id": schedule.pk, "title": "Renamed", **extra}
    _, seen, _ = _use(owner, wire, ("schedule_update", arguments), tools=SCHEDULE_TOOLS)

    text, is_error = seen[0]
    field = next(iter(extra))
    assert is_error and text.startswith(f"Error: {field} cannot be changed by schedule.update")  # named once
    assert ScheduleRevision.objects.filter(schedule=schedule).count() == 1
    schedule.refresh_from_db()
    assert schedule.title == "Morning briefing"


def test_schedule_update_changes_the_prompt_through_a_new_revision(owner):
    schedule = make_schedule(owner, make_wire_agent(OPENAI))
    arguments = {"schedule_id": schedule.pk, "prompt": "Brief me on markets instead."}
    _, seen, _ = _use(owner, OPENAI, ("schedule_update", arguments), tools=SCHEDULE_TOOLS)

    schedule.refresh_from_db()
    assert seen[0][1] is False
    assert (schedule.revision.number, schedule.revision.prompt) == (2, "Brief me on markets instead.")
    assert schedule.revision.limits == ScheduleRevision.objects.get(schedule=schedule, number=1).limits


def test_schedule_update_cannot_reach_another_owners_schedule(owner):
    theirs = make_schedule(make_user("mallory"), make_wire_agent(OPENAI))
    arguments = {"schedule_id": theirs.pk, "title": "Mine now"}
    _, seen, _ = _use(owner, OPENAI, ("schedule_update", arguments), tools=SCHEDULE_TOOLS)

    assert seen == [(f"Error: there is no schedule {theirs.pk} of yours", True)]
