from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.http import HttpResponse
from django.test import Client

from schedules import tokens
from tests.api.contract import PREFIX, served_contract

ALL_SCOPES = ("read", "write", "pin_revision")


class Api:
    """Django's test client speaking JSON with a bearer token. Every response it receives is
    checked against the served OpenAPI schema (tests/api/contract.py)."""

    def __init__(self, secret: str | None = None) -> None:
        self.secret = secret
        self.client = Client()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: str | bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> HttpResponse:
        url = path if path.startswith("http") or path.startswith(PREFIX) else PREFIX + path
        extra: dict[str, str] = {}
        if self.secret is not None:
            extra["HTTP_AUTHORIZATION"] = f"Bearer {self.secret}"
        data: str | bytes = raw if raw is not None else (json.dumps(body) if body is not None else "")
        response: HttpResponse = self.client.generic(
            method, url, data, content_type="application/json", headers=headers, **extra
        )
        served_contract().check(method, url.split("testserver", 1)[-1], response)
        return response

    def get(self, path: str, **kwargs: Any) -> HttpResponse:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> HttpResponse:
        return self.request("POST", path, body, **kwargs)

    def patch(self, path: str, body: Any = None, **kwargs: Any) -> HttpResponse:
        return self.request("PATCH", path, body, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> HttpResponse:
        return self.request("DELETE", path, **kwargs)


def token_for(user: User, *scopes: str) -> str:
    """A token of `user` with `scopes`. A user without the pin permission can only hold a
    pin_revision token made while they had it: the permission is granted for the creation and
    withdrawn again, so the token models one whose user has since lost the permission."""
    wanted = list(scopes or ALL_SCOPES)
    if "pin_revision" in wanted and not user.has_perm("schedules.pin_revision"):
        permission = Permission.objects.get(codename="pin_revision")
        user.user_permissions.add(permission)
        holder = User.objects.get(pk=user.pk)
        _, secret = tokens.create_api_token(holder, name="test", scopes=wanted, by=holder)
        user.user_permissions.remove(permission)
        return secret
    _, secret = tokens.create_api_token(user, name="test", scopes=wanted, by=user)
    return secret


@pytest.fixture(autouse=True)
def _fresh_rate_limits() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def api_as() -> Callable[..., Api]:
    """api_as(user, "read", "write"): a client with a new token of those scopes (default: all)."""

    def make(user: User, *scopes: str) -> Api:
        return Api(token_for(user, *scopes))

    return make


@pytest.fixture
def owner_api(owner: User) -> Api:
    return Api(token_for(owner, "read", "write"))


@pytest.fixture
def other_api(other_owner: User) -> Api:
    return Api(token_for(other_owner, *ALL_SCOPES))


@pytest.fixture
def admin_api(admin_user: User) -> Api:
    return Api(token_for(admin_user, *ALL_SCOPES))


@pytest.fixture
def anonymous_api() -> Api:
    return Api()


def error_of(response: HttpResponse) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


# Every route of docs/contract.md#json-api: (method, path with {schedule}/{run}/{conversation}, scope, a
# valid body).
def valid_pin_body() -> dict[str, Any]:
    from tests.factories import limits

    return {
        "limits": limits(max_cost="8.00", synthesis_reserve_cost="1.50").to_json(),
        "max_consecutive_failures": 3,
        "reason": "Research runs need USD 8 now.",
    }


ROUTES: list[tuple[str, str, str, Any]] = [
    ("GET", "/schedules", "read", None),
    (
        "POST",
        "/schedules",
        "write",
        {
            "title": "Evening digest",
            "prompt": "Summarise.",
            "agent": "researcher",
            "cron": "0 18 * * *",
            "timezone": "Europe/Riga",
        },
    ),
    ("GET", "/schedules/{schedule}", "read", None),
    ("PATCH", "/schedules/{schedule}", "write", {"title": "Renamed"}),
    ("POST", "/schedules/{schedule}/pause", "write", None),
    ("POST", "/schedules/{schedule}/resume", "write", None),
    ("GET", "/schedules/{schedule}/revisions", "read", None),
    ("POST", "/schedules/{schedule}/revisions", "pin_revision", "pin"),
    ("GET", "/schedules/{schedule}/occurrences", "read", None),
    ("GET", "/runs/{run}", "read", None),
    ("GET", "/runs/in-flight", "read", None),
    ("GET", "/accounting-events?schedule={schedule}", "read", None),
    ("GET", "/budget", "read", None),
    ("PUT", "/budget/alerts", "write", {"thresholds": [50, 80, 100]}),
    ("DELETE", "/conversations/{conversation}", "write", None),
    ("GET", "/conversations", "read", None),
    ("GET", "/conversations/{chat}", "read", None),
    ("POST", "/conversations", "write", {"agent": "researcher", "message": "What is on today?"}),
    ("POST", "/conversations/{chat}/messages", "write", {"message": "And tomorrow?"}),
    ("POST", "/runs/{live}/cancel", "write", None),
    ("POST", "/schedules/{schedule}/revision-requests", "write", "ask"),
    ("GET", "/revision-requests?state=open", "pin_revision", "queue"),
    ("POST", "/revision-requests/{request}/decision", "pin_revision", "decide"),
    ("POST", "/proposals/{proposal}/confirm", "write", None),
    ("POST", "/proposals/{proposal}/decline", "write", None),
]
# Routes an admin (pin permission) succeeds on; the others succeed for the owner.
ADMIN_BODIES = ("pin", "queue", "decide")


class World:
    """An owner's schedule with one failed, accounted run, and a conversation the owner started
    whose first message was answered (`chat`). `live` is a run in flight, made when asked for."""

    def __init__(self, owner: User, agent: Any) -> None:
        from runs.models import Run
        from tests.factories import answered_conversation, fail, make_schedule, materialize

        self.owner, self.agent = owner, agent
        self.schedule = make_schedule(owner, agent)
        self.run: Run = fail(materialize(self.schedule))
        self.schedule.refresh_from_db()
        self.chat = answered_conversation(owner, agent)
        self.live: Run | None = None

    def path(self, template: str) -> str:
        from tests.factories import running_run

        if "{live}" in template and self.live is None:
            self.live = running_run(self.owner, self.agent)
        request = self.open_request().pk if "{request}" in template else None
        proposal = self.open_proposal().pk if "{proposal}" in template else None
        return template.format(
            schedule=self.schedule.pk,
            run=self.run.pk,
            conversation=self.run.conversation_id,
            chat=self.chat.pk,
            live=self.live.pk if self.live else 0,
            request=request,
            proposal=proposal,
        )

    def open_proposal(self) -> Any:
        """A schedule the assistant proposed in `chat` (its first run's schedule.create), made on
        first use (docs/contract.md#confirm-before-chat-creates-a-schedule)."""
        from schedules import proposals
        from schedules.models import Proposal

        found = Proposal.objects.filter(conversation=self.chat).first()
        if found is None:
            run = self.chat.runs.order_by("pk").first()
            found = proposals.propose(run, PROPOSED)
        return found

    def open_request(self) -> Any:
        """The owner's open revision request on this schedule (asked on first use)."""
        from schedules import services
        from schedules.models import RevisionRequest
        from schedules.schemas import parse_revision_request

        waiting = RevisionRequest.objects.filter(schedule=self.schedule, state="open").first()
        if waiting is None:
            waiting = services.request_revision(
                self.schedule, parse_revision_request(valid_ask_body()), by=self.schedule.owner, via="test"
            )
        return waiting


@pytest.fixture
def world(owner: User, agent: Any) -> World:
    return World(owner, agent)


PROPOSED = {
    "title": "Evening digest",
    "prompt": "Summarise.",
    "cron": "0 18 * * *",
    "timezone": "Europe/Riga",
}


def valid_ask_body() -> dict[str, Any]:
    return {**valid_pin_body(), "reason": "The briefings cost USD 1.20 now; USD 8 leaves room."}


def valid_decision_body() -> dict[str, Any]:
    return {"decision": "pin", **valid_pin_body()}


BODIES = {"pin": valid_pin_body, "ask": valid_ask_body, "decide": valid_decision_body, "queue": lambda: None}


def body_of(body: Any) -> Any:
    """A route's body: a marker of ROUTES ("pin", "ask", ...) made fresh, or the body itself."""
    return BODIES[body]() if isinstance(body, str) and body in BODIES else body
