"""Every documented response of every operation is produced here, and every response (success and
error) is validated against the schema the API serves (tests/api/contract.py, via the Api client).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.http import HttpResponse
from django.utils import timezone

from accounting import ledger
from accounting.models import OwnerBudget
from config.middleware import MAX_URL_BYTES
from runs.models import Run
from tests.api.conftest import (
    ADMIN_BODIES,
    ALL_SCOPES,
    ROUTES,
    Api,
    World,
    body_of,
    token_for,
    valid_pin_body,
)
from tests.api.contract import Contract, served_contract
from tests.factories import finish, make_schedule, make_user, materialize, running_run

pytestmark = pytest.mark.django_db

INVALID_BODIES = {
    ("POST", "/schedules"): {"title": 7},
    ("PATCH", "/schedules/{schedule}"): {"max_cost": "9.00"},
    ("POST", "/schedules/{schedule}/revisions"): {"limits": {}, "reason": ""},
    ("POST", "/conversations"): {"agent": "researcher", "message": "   "},
    ("POST", "/conversations/{chat}/messages"): {"message": ""},
    ("POST", "/schedules/{schedule}/revision-requests"): {"limits": {"max_cost": "5_0"}},
    ("POST", "/revision-requests/{request}/decision"): {"decision": "maybe"},
    ("PUT", "/budget/alerts"): {"thresholds": [0, "50"]},
}
CONFLICTS = {
    ("POST", "/schedules"): "full",
    ("POST", "/schedules/{schedule}/pause"): "paused",
    ("POST", "/schedules/{schedule}/resume"): "active",
    ("PATCH", "/schedules/{schedule}"): "completed",
    ("DELETE", "/conversations/{conversation}"): "busy",
    ("POST", "/conversations"): "no room",
    ("POST", "/conversations/{chat}/messages"): "answering",
    ("POST", "/runs/{live}/cancel"): "ended",
    ("POST", "/schedules/{schedule}/revision-requests"): "asked",
    ("POST", "/revision-requests/{request}/decision"): "decided",
    ("POST", "/proposals/{proposal}/confirm"): "declined",
    ("POST", "/proposals/{proposal}/decline"): "confirmed",
}
# A proposal's other answers: confirmed again (200) and expired (410).
PROPOSAL_STATES = {
    ("POST", "/proposals/{proposal}/confirm"): ("confirmed", "expired"),
    ("POST", "/proposals/{proposal}/decline"): ("expired",),
}


class Matrix:
    def __init__(self, owner, other_owner, admin_user, agent) -> None:
        self.owner, self.agent = owner, agent
        self.owner_api = Api(token_for(owner, *ALL_SCOPES))
        self.other_api = Api(token_for(other_owner, *ALL_SCOPES))
        self.admin_api = Api(token_for(admin_user, *ALL_SCOPES))
        # May pin, but is neither the owner nor an admin: pinning the owner's schedule is a 404.
        self.pinner_api = Api(token_for(make_user("pinner", pin=True), *ALL_SCOPES))

    def fresh(self) -> World:
        return World(self.owner, self.agent)

    def success(self, method: str, template: str, body) -> HttpResponse:
        world = self.fresh()
        if template.endswith("/resume"):
            self.owner_api.post(world.path("/schedules/{schedule}/pause"))
        api = self.admin_api if body in ADMIN_BODIES else self.owner_api
        return api.request(method, world.path(template), body_of(body))

    def conflict(self, method: str, template: str) -> HttpResponse:
        state = CONFLICTS[(method, template)]
        world = self.fresh()
        if state == "paused":
            self.owner_api.post(world.path("/schedules/{schedule}/pause"))
        if state == "completed":
            one_time = make_schedule(self.owner, self.agent, run_at=timezone.now() + timedelta(hours=1))
            finish(materialize(one_time))
            world.schedule = one_time
        body = {"title": "x"} if method == "PATCH" else None
        if state == "busy":
            world.run = Run.objects.get(pk=materialize(world.schedule).run_id)
        if state == "asked":  # one open request at a time
            world.open_request()
            return self.owner_api.request(method, world.path(template), body_of("ask"))
        if state in ("declined", "confirmed", "expired"):
            return self.proposal_in(state, method, template)
        if state == "decided":
            path = world.path(template)
            self.admin_api.request(method, path, body_of("decide"))
            return self.admin_api.request(method, path, body_of("decide"))
        if state == "answering":
            running_run(self.owner, self.agent, conversation=world.chat)
            body = {"message": "Me again"}
        if state == "ended":
            world.live = world.run
        if state == "full":  # as many active schedules as this owner may have
            active = world.schedule.owner.schedules.filter(status="active").count()
            ledger.budget_for(self.owner.pk)
            OwnerBudget.objects.filter(owner_id=self.owner.pk).update(max_active_schedules=active)
            body = next(b for m, t, _, b in ROUTES if (m, t) == ("POST", "/schedules"))
        if state == "no room":
            budget = ledger.budget_for(self.owner.pk)
            budget.daily_ceiling = Decimal("1.00")
            budget.save(update_fields=["daily_ceiling"])
            body = {"agent": self.agent.name, "message": "Too dear today?"}
        try:
            return self.owner_api.request(method, world.path(template), body)
        finally:
            OwnerBudget.objects.filter(owner_id=self.owner.pk).update(
                daily_ceiling=None, max_active_schedules=None
            )

    def proposal_in(self, state: str, method: str, template: str) -> HttpResponse:
        """The route on a proposal that is `state` already (declined, confirmed or expired)."""
        from schedules.models import Proposal

        world = self.fresh()
        proposal = world.open_proposal()
        if state in ("declined", "confirmed"):
            action = {"declined": "decline", "confirmed": "confirm"}[state]
            self.owner_api.post(f"/proposals/{proposal.pk}/{action}")
        if state == "expired":
            Proposal.objects.filter(pk=proposal.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        return self.owner_api.request(method, world.path(template))

    def rate_limited(self, method: str, template: str, body) -> HttpResponse:
        world = self.fresh()
        api = Api(token_for(self.owner, *ALL_SCOPES))
        with time_machine.travel(datetime(2026, 9, 3, 9, 0, 0, tzinfo=UTC), tick=False):
            api.get("/budget")
            return api.request(method, world.path(template), body_of(body))


def test_every_documented_response_is_produced_and_matches_the_served_schema(
    owner, other_owner, admin_user, agent, settings
):
    settings.MAX_ACTIVE_SCHEDULES = 10_000  # each route's fresh world adds schedules of one owner
    contract: Contract = served_contract()
    contract.seen.clear()
    matrix = Matrix(owner, other_owner, admin_user, agent)

    for method, template, scope, body in ROUTES:
        key = (method, template)
        operation = contract.operation(method, "/api/v1" + template.split("?")[0])
        assert operation is not None, key
        documented = set(operation["responses"])
        statuses = {
            matrix.success(method, template, body).status_code,
            Api().request(method, matrix.fresh().path(template), body_of(body)).status_code,
            Api(token_for(owner, *[s for s in ALL_SCOPES if s != scope]))
            .request(method, matrix.fresh().path(template), body_of(body))
            .status_code,
        }
        if "{" in template and "?" not in template:
            stranger = matrix.pinner_api if body in ADMIN_BODIES else matrix.other_api
            statuses.add(stranger.request(method, matrix.fresh().path(template), body_of(body)).status_code)
        if key in CONFLICTS:
            statuses.add(matrix.conflict(method, template).status_code)
        for state in PROPOSAL_STATES.get(key, ()):
            statuses.add(matrix.proposal_in(state, method, template).status_code)
        if key in INVALID_BODIES:
            api = matrix.admin_api if body in ADMIN_BODIES else matrix.owner_api
            statuses.add(api.request(method, matrix.fresh().path(template), INVALID_BODIES[key]).status_code)
            settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
            big = {**(body_of(body) or {}), "reason": "x" * 2048}
            statuses.add(api.request(method, matrix.fresh().path(template), big).status_code)
            settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
        elif method == "GET" and "422" in documented:
            separator = "&" if "?" in template else "?"
            statuses.add(
                matrix.owner_api.get(matrix.fresh().path(template) + separator + "limit=0").status_code
            )
        padded = matrix.fresh().path(template) + ("&" if "?" in template else "?") + "pad="
        statuses.add(
            matrix.owner_api.request(method, padded + "x" * MAX_URL_BYTES, body_of(body)).status_code
        )
        settings.API_RATE_LIMIT_PER_MINUTE = 1
        statuses.add(matrix.rate_limited(method, template, body).status_code)
        settings.API_RATE_LIMIT_PER_MINUTE = 120

        assert {str(s) for s in statuses} == documented, key

    assert contract.seen == contract.documented()


def test_the_contract_check_catches_an_undocumented_status_or_a_wrong_body():
    contract = served_contract()
    wrong = HttpResponse(b'{"items": [{"id": "one"}], "next": null}', content_type="application/json")
    with pytest.raises(AssertionError, match="does not match the schema"):
        contract.check("GET", "/api/v1/schedules", wrong)
    teapot = HttpResponse(b"{}", status=418, content_type="application/json")
    with pytest.raises(AssertionError, match="does not document"):
        contract.check("GET", "/api/v1/budget", teapot)
    naive = HttpResponse(
        b'{"ceilings": {"daily": "1.00", "monthly": "1.00"}, "spent": {"today": "1", "month": "1.00"},'
        b' "open_reservations": {"count": 0, "total": "0.00"}}',
        content_type="application/json",
    )
    with pytest.raises(AssertionError, match="today"):
        contract.check("GET", "/api/v1/budget", naive)


def test_times_must_carry_an_offset():
    contract = served_contract()
    occurrence = (
        b'{"items": [{"id": 1, "scheduled_for": "2026-09-03T09:00:00", "outcome": "pending",'
        b' "revision": 1, "run_id": null}], "next": null}'
    )
    with pytest.raises(AssertionError, match="is not a 'date-time'"):
        contract.check(
            "GET",
            "/api/v1/schedules/1/occurrences",
            HttpResponse(occurrence, content_type="application/json"),
        )


def test_the_pin_body_used_here_is_valid():
    assert valid_pin_body()["limits"]["max_cost"] == "8.00"
