"""Every cross-field rule through every API body that carries its fields (tests/cross_field_rules.py
generates the bodies from the served request schemas): each is a 422 in the error shape of
docs/contract.md#json-api naming the field at fault, and nothing is written. A rule checked after
the body was parsed, where the error mapping no longer sees it, answered 500 here once (a pin
decision whose monthly cap was below its own max_cost)."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from django.test import Client

from schedules import services
from schedules.schemas import parse_explicit
from tests.api.conftest import (
    ADMIN_BODIES,
    ALL_SCOPES,
    ROUTES,
    Api,
    World,
    body_of,
    error_of,
    token_for,
    valid_pin_body,
)
from tests.api.contract import PREFIX, Contract
from tests.cross_field_rules import RULES, Variant, body_component, properties, row_counts, variants

pytestmark = pytest.mark.django_db

# Bodies no cross-field rule applies to, and why: each of their fields is checked on its own.
WITHOUT_CROSS_FIELD_RULES = {
    "ConversationCreate": "agent and message are each checked alone",
    "MessageCreate": "one field",
}


@cache
def _served() -> Contract:
    """The served schema, read when this module is collected (before the test environment allows
    the test client's host name, so as `localhost`)."""
    return Contract(Client().get(f"{PREFIX}/openapi.json", HTTP_HOST="localhost").json())


def _operations() -> list[tuple[str, str, str, str, Any]]:
    """(method, route of ROUTES, its scope, body component, a valid body) of every operation of the
    served schema that takes a JSON body."""
    contract = _served()
    found = []
    for method, template, scope, body in ROUTES:
        operation = contract.operation(method, PREFIX + template.split("?")[0])
        component = body_component(operation or {})
        if component is not None:
            found.append((method, template, scope, component, body))
    return found


def _cases() -> list[Any]:
    components = _served().components["schemas"]
    cases = []
    for method, template, scope, component, body in _operations():
        for variant in variants(components[component], components, body_of(body)):
            case = (method, template, scope, body, variant)
            cases.append(pytest.param(*case, id=f"{method} {template} {variant.moved} ({variant.rule})"))
    return cases


def test_every_body_the_api_takes_has_a_valid_example_in_routes():
    contract = _served()
    taken = {
        (method.upper(), template)
        for template, operations in contract.document["paths"].items()
        for method, operation in operations.items()
        if body_component(operation)
    }
    covered = {(m, contract.template(PREFIX + t.split("?")[0])) for m, t, _, _, _ in _operations()}
    assert covered == taken


def test_every_body_is_swept_unless_said_to_have_no_cross_field_rule():
    components = _served().components["schemas"]
    for method, template, _, component, body in _operations():
        swept = variants(components[component], components, body_of(body))
        assert bool(swept) != (component in WITHOUT_CROSS_FIELD_RULES), (method, template, component)


def test_every_rule_applies_to_some_body():
    components = _served().components["schemas"]
    for rule in RULES:
        made = [
            variant
            for _, _, _, component, body in _operations()
            for variant in rule(properties(components[component], components), body_of(body))
        ]
        assert made, f"{rule.__name__} applies to no body of the API"


@pytest.mark.parametrize(("method", "template", "scope", "marker", "variant"), _cases())
def test_a_body_across_a_cross_field_rule_is_a_422_naming_the_field_and_writes_nothing(
    method: str,
    template: str,
    scope: str,
    marker: Any,
    variant: Variant,
    owner,
    admin_user,
    agent,
):
    world = World(owner, agent)
    path = world.path(template)  # the request or proposal the route needs is made first
    user = admin_user if marker in ADMIN_BODIES else owner
    api = Api(token_for(user, scope))
    before = row_counts()
    response = api.request(method, path, variant.body)
    assert response.status_code == 422, response.content
    error = error_of(response)
    assert set(error) == {"code", "message", "fields"} and error["message"] and error["code"]
    assert variant.names & set(error["fields"]), (variant.names, error)
    assert row_counts() == before


@pytest.mark.parametrize(
    ("method", "template", "marker"),
    [
        pytest.param(method, template, body, id=f"{method} {template}")
        for method, template, _, component, body in _operations()
        if "monthly_cap" in _served().components["schemas"][component].get("properties", {})
    ],
)
def test_a_body_that_keeps_a_cap_below_its_new_cost_is_a_422_naming_monthly_cap(
    method: str, template: str, marker: Any, owner, admin_user, agent
):
    """Without monthly_cap, a revision keeps the cap in force (a decision, the one asked for): a
    max_cost raised above it is refused as if the cap had been given."""
    world = World(owner, agent)
    capped = parse_explicit({**valid_pin_body(), "monthly_cap": "8.00"})
    services.pin_revision(world.schedule, capped, by=admin_user, via="test")
    path = world.path(template)
    body = body_of(marker)
    body["limits"] = {**body["limits"], "max_cost": "9.00"}
    api = Api(token_for(admin_user if marker in ADMIN_BODIES else owner, *ALL_SCOPES))
    before = row_counts()
    response = api.request(method, path, body)
    assert response.status_code == 422, response.content
    assert "monthly_cap" in error_of(response)["fields"]
    assert row_counts() == before
