"""Every URL pattern of the product (dashboard, admin and its custom views, API), requested as
nobody, as the owner, as another owner and as an admin, with hostile values in every path
parameter and in the query string, and (on the dashboard, the only area that reads it) with and
without HX-Request: never a 5xx. The 10,000-character value makes an address longer than any
server of the product serves (config.middleware.MAX_URL_BYTES, gunicorn's own limit): in a path
or a query it meets the 414 before any view, as in production; in the POSTed forms it reaches
every field.

The patterns are read from the URL resolver, so a route added later is crawled without anyone
remembering to add it here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from config.middleware import MAX_URL_BYTES
from schedules import tokens
from tests.factories import fail, make_agent, make_schedule, make_user, materialize

pytestmark = pytest.mark.django_db

# Hostile values, already percent-encoded where they go into a URL.
HOSTILE = [
    "%00",  # NUL: PostgreSQL refuses it in text
    "%ff",  # not UTF-8
    "-1",
    "0",
    "9" * 30,  # beyond a bigint
    quote("\u0663"),  # an Arabic-Indic digit three
    quote("\uff13"),  # a fullwidth three
    "abc",
    "1%00",
    "x" * 10_000,
]
QUERY_NAMES = [
    "q",
    "page",
    "status",
    "agent",
    "cursor",
    "limit",
    "schedule",
    "state",
    "tab",
    "kind",
    "p",
    "o",
    "e",
    "status__exact",
    "kind__exact",
    "failure_reason__exact",
    "error_class__exact",
    "outcome__exact",
    "provider",
    "last_failure_reason",
    "last_error_class",
    "last_provider",
    "pause_reason",
    "action__exact",
    "reason__exact",
    "path__exact",
    "event__exact",
    "channel__exact",
    "is_test__exact",
    "is_active__exact",
    "created_at__gte",
    "created_at__lt",
    "_changelist_filters",
    "next",
    "title",
    "prompt",
    "cron",
    "timezone",
    "run_at",
    "_popup",
    "_to_field",
    "after",
    "before",
    "start",
    "request",
    "check",
    "confirm",
    "cancel",
    "message",
    "edit",
    "base_revision",
    # The fields of the forms added since: limits, requests, the admin's agents and owner caps.
    "max_steps",
    "max_model_calls",
    "max_tool_calls",
    "max_cost",
    "synthesis_reserve_steps",
    "synthesis_reserve_model_calls",
    "synthesis_reserve_tool_calls",
    "synthesis_reserve_cost",
    "max_consecutive_failures",
    "reason",
    "decision",
    "history_turns",
    "history_tokens",
    "max_active_schedules",
    "chat_min_interval_minutes",
    "daily_ceiling",
    "monthly_ceiling",
    "webhook_url",
    "email_enabled",
    "webhook_enabled",
    "confirmed",
]
_CONVERTER = re.compile(r"<(?:(?P<kind>\w+):)?(?P<name>\w+)>")
_GROUP = re.compile(r"\(\?P<(?P<name>\w+)>(?P<body>[^)]*)\)")


def url_templates() -> list[str]:
    """Every pattern as a path with `{}` where a parameter goes."""

    def walk(patterns: list[Any], prefix: str) -> Iterator[str]:
        for pattern in patterns:
            text = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, text)
            elif isinstance(pattern, URLPattern):
                yield text

    templates = set()
    for raw in walk(get_resolver().url_patterns, ""):
        path = raw.replace("^", "").replace("$", "").replace("\\", "")
        path = _CONVERTER.sub("{}", path)
        # A regex group: its first alternative stands in for a real value (admin app labels).
        path = _GROUP.sub(lambda m: m["body"].split("|")[0] if "|" in m["body"] else "{}", path)
        templates.add("/" + path.replace(".*", "{}"))
    return sorted(templates)


def fills(template: str, real_ids: list[int]) -> list[str]:
    if "{}" not in template:
        return [template]
    values = [str(i) for i in real_ids] + HOSTILE
    return [template.replace("{}", value) for value in values]


def hostile_query(index: int) -> str:
    value = HOSTILE[index % len(HOSTILE)]
    return "&".join(f"{name}={value}" for name in QUERY_NAMES)


@pytest.fixture
def people(db: None, settings: Any) -> dict[str, Client | None]:
    # Thousands of requests: sessions in the cache, not a table, so each request costs what the
    # page costs (the crawl looks for 5xx answers, not at where sessions are kept).
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.cache"
    owner = make_user("crawl-owner", tz="Europe/Riga")
    other = make_user("crawl-other")
    admin = make_user("crawl-admin", staff=True, pin=True)
    User.objects.filter(pk=admin.pk).update(is_superuser=True)
    clients: dict[str, Client | None] = {"anonymous": Client(raise_request_exception=False)}
    for name, user in (("owner", owner), ("other", other), ("admin", User.objects.get(pk=admin.pk))):
        client = Client(raise_request_exception=False)
        client.force_login(user)
        _, secret = tokens.create_api_token(user, name="crawl", scopes=["read", "write"], by=user)
        client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
        clients[name] = client
    return clients


@pytest.fixture
def world(people: dict[str, Client | None]) -> list[int]:
    """Real objects, so that path parameters also hit rows that exist: the owner's schedule, its
    failed run, that run's conversation (their ids double as ids of other kinds of object)."""
    owner = User.objects.get(username="crawl-owner")
    schedule = make_schedule(owner, make_agent("crawl-agent"))
    run = fail(materialize(schedule))
    return sorted({schedule.pk, run.pk, run.conversation_id})


def crawl(client: Client, urls: list[str], *, htmx: bool = True) -> list[str]:
    """`htmx`: also as an HTMX request. The admin and the API never read HX-Request
    (tests/test_architecture.py keeps it so), so there it would repeat the same request."""
    failures = []
    variants = ({}, {"HX-Request": "true"}) if htmx else ({},)
    for index, url in enumerate(urls):
        separator = "&" if "?" in url else "?"
        for target in (url, f"{url}{separator}{hostile_query(index)}"):
            for headers in variants:
                response = client.get(target, headers=headers)
                if response.status_code >= 500:
                    failures.append(f"GET {target[:120]} {headers} -> {response.status_code}")
        if "logout" in url:
            continue  # a POST there signs the crawler out: the rest would only see the login page
        # The same values decoded, as a browser would send them: a real NUL, real non-ASCII digits.
        value = unquote_to_bytes(HOSTILE[index % len(HOSTILE)]).decode("utf-8", "surrogateescape")
        value = value.encode("utf-8", "replace").decode("utf-8", "replace")
        body = {name: value for name in QUERY_NAMES}
        for kind, response in (
            ("multipart", client.post(url, body)),
            (
                "urlencoded",
                client.post(url, urlencode(body), content_type="application/x-www-form-urlencoded"),
            ),
        ):
            if response.status_code >= 500:
                failures.append(f"POST {url[:120]} ({kind}, {value[:8]!r}) -> {response.status_code}")
    return failures


AREAS = {
    "dashboard": lambda t: not t.startswith(("/admin/", "/api/")),
    "api": lambda t: t.startswith("/api/"),
    "admin": lambda t: t.startswith("/admin/"),
}


@pytest.mark.parametrize("who", ["anonymous", "owner", "other", "admin"])
@pytest.mark.parametrize("area", list(AREAS))
def test_no_url_answers_5xx_to_anyone_whatever_its_parameters(people, world, who, area):
    client = people[who]
    assert client is not None
    templates = [t for t in url_templates() if AREAS[area](t)]
    assert templates, f"no {area} URL patterns found"
    urls = [url for template in templates for url in fills(template, world)]
    assert crawl(client, urls, htmx=area == "dashboard") == []
    if who != "anonymous":  # and it stayed signed in to the end: it saw the pages, not the login
        assert client.get("/admin/" if who == "admin" else "/").status_code == 200


def test_the_crawler_sees_every_kind_of_route():
    templates = url_templates()
    for expected in ("/schedules/{}/", "/api/v1/runs/{}", "/admin/schedules/schedule/{}/pin/", "/budget/"):
        assert expected in templates


@pytest.mark.parametrize(
    ("who", "url", "headers"),
    [  # each answered 500 before
        ("owner", "/?q=%00", {}),
        ("owner", "/schedules/new/?agent=%00", {}),
        ("owner", "/schedules/new/preview/?agent=%00", {}),
        ("admin", "/admin/schedules/schedule/abc/pin/", {}),
        ("admin", "/admin/schedules/schedule/1%00/pin/", {}),
        ("admin", "/admin/schedules/schedule/?last_failure_reason=%00", {}),
        ("admin", "/admin/runs/run/?status__exact=%00", {}),
        ("owner", "/budget/", {"HX-Request": "true"}),
    ],
)
def test_the_urls_that_once_answered_500(people, world, who, url, headers):
    client = people[who]
    assert client is not None
    assert client.get(url, headers=headers, follow=True).status_code in (200, 400, 404)


@pytest.mark.parametrize("multipart", [True, False], ids=["multipart", "urlencoded"])
def test_a_nul_in_a_posted_form_is_a_400_not_a_500(people, multipart):
    client = people["owner"]
    assert client is not None
    body = {"agent": "a\x00b", "title": "t", "prompt": "p", "cron": "0 9 * * *", "timezone": "UTC"}
    if multipart:
        response = client.post("/schedules/new/", body)
    else:
        response = client.post(
            "/schedules/new/", urlencode(body), content_type="application/x-www-form-urlencoded"
        )
    assert response.status_code == 400 and "NUL character" in response.text


@pytest.mark.parametrize(
    ("path", "json_error"), [("/", False), ("/admin/runs/run/", False), ("/api/v1/schedules", True)]
)
def test_an_address_longer_than_production_serves_is_a_414_and_one_at_the_limit_is_served(
    people, path, json_error
):
    """gunicorn refuses a request line over 4,094 bytes before Django sees it; the other servers
    (the development server, the test client) refuse the same address here, before any view."""
    client = people["admin"]
    assert client is not None
    at_limit = f"{path}?q=" + "x" * (MAX_URL_BYTES - len(path) - len("q="))
    assert client.get(at_limit).status_code == 200
    response = client.get(at_limit + "x")
    assert response.status_code == 414
    if json_error:
        assert response.json()["error"]["code"] == "url_too_long"
    else:
        assert "longer than 4,094 bytes" in response.text
    # In the path as well, and before the sign-in redirect could carry it on as `next`.
    response = people["anonymous"].get(path + "x" * MAX_URL_BYTES)  # type: ignore[union-attr]
    assert response.status_code == 414 and "Location" not in response.headers
