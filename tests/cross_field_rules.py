"""Bodies that break a cross-field rule, one field at a time, generated from the request schemas the
API serves (its OpenAPI document). A rule is found by the fields a body has, not by the body's name:
any body with limits gets the reserve rules, any body with a monthly cap and limits the cap rule,
any body with run_at and cron the recurrence rules. So a new body, or a new reserve in RunLimits,
is swept without editing this file. Used by tests/api/test_cross_field_rules.py and, flattened into
form fields, by the admin's pin page tests (tests/views/test_admin_cross_field_rules.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.apps import apps
from django.utils import timezone
from pydantic import BaseModel

Schema = dict[str, Any]


@dataclass(frozen=True)
class Variant:
    """A valid body with `moved` (a dotted field) put on the wrong side of `rule`; the refusal must
    name one of `names`, the fields the rule holds at fault."""

    rule: str
    moved: str
    body: dict[str, Any]
    names: frozenset[str]


def resolve(schema: Schema, components: dict[str, Schema]) -> Schema:
    """A property's schema with `$ref` followed and a nullable `anyOf [X, null]` read as X."""
    if "$ref" in schema:
        return resolve(components[schema["$ref"].rsplit("/", 1)[-1]], components)
    options = [s for s in schema.get("anyOf", []) if s.get("type") != "null"]
    if len(options) == 1:
        return resolve(options[0], components)
    return schema


def properties(schema: Schema, components: dict[str, Schema]) -> dict[str, Schema]:
    return {
        name: resolve(value, components)
        for name, value in resolve(schema, components).get("properties", {}).items()
    }


def _money(value: Decimal) -> str:
    return f"{value:.2f}"


def _smallest_positive(like: Any) -> Any:
    return "0.01" if isinstance(like, str) else 1


def _at_least(value: Any, floor: Any) -> Any:
    """`value`, or the smallest positive amount of its kind when it is not positive."""
    number = Decimal(str(value))
    return value if number > 0 else floor


def _without(body: dict[str, Any], *names: str) -> dict[str, Any]:
    return {key: value for key, value in body.items() if key not in names}


def reserves_below_totals(props: dict[str, Schema], body: dict[str, Any]) -> Iterator[Variant]:
    """synthesis_reserve_<d> must be below max_<d> when positive: each reserve raised to its total,
    and each total lowered to its (positive) reserve."""
    for name, schema in props.items():
        inner = schema.get("properties", {})
        if name not in body or not isinstance(body[name], dict):
            continue
        limits = body[name]
        for reserve in inner:
            total = "max_" + reserve.removeprefix("synthesis_reserve_")
            if not reserve.startswith("synthesis_reserve_") or total not in inner:
                continue
            rule = f"{reserve} below {total}"
            at_fault = frozenset({f"{name}.{reserve}"})
            yield Variant(
                rule, f"{name}.{reserve}", {**body, name: {**limits, reserve: limits[total]}}, at_fault
            )
            kept = _at_least(limits[reserve], _smallest_positive(limits[total]))
            lowered = {**limits, reserve: kept, total: kept}
            yield Variant(rule, f"{name}.{total}", {**body, name: lowered}, at_fault)


def cap_admits_a_run(props: dict[str, Schema], body: dict[str, Any]) -> Iterator[Variant]:
    """monthly_cap may not be below the max_cost of one run: the cap lowered under it, and the cost
    raised over a cap equal to it."""
    if "monthly_cap" not in props:
        return
    for name, schema in props.items():
        if "max_cost" not in schema.get("properties", {}) or not isinstance(body.get(name), dict):
            continue
        limits = body[name]
        cost = Decimal(str(limits["max_cost"]))
        rule = f"monthly_cap at least {name}.max_cost"
        at_fault = frozenset({"monthly_cap"})
        yield Variant(rule, "monthly_cap", {**body, "monthly_cap": _money(cost - Decimal("0.01"))}, at_fault)
        raised = {**limits, "max_cost": _money(cost + Decimal("1.00"))}
        yield Variant(rule, f"{name}.max_cost", {**body, "monthly_cap": _money(cost), name: raised}, at_fault)


def one_recurrence(props: dict[str, Schema], body: dict[str, Any]) -> Iterator[Variant]:
    """A one-time schedule has run_at, a recurring one cron with its timezone; never both."""
    if not {"run_at", "cron"} <= props.keys():
        return
    recurrence = frozenset({"run_at", "cron"})
    if "run_at" not in body:
        ahead = (timezone.now() + timedelta(days=1)).isoformat()
        yield Variant("run_at or cron, not both", "run_at", {**body, "run_at": ahead}, recurrence)
    else:
        yield Variant("run_at or cron, not both", "cron", {**body, "cron": "0 9 * * *"}, recurrence)
    if "cron" in body and "timezone" in body:
        yield Variant(
            "cron with its timezone", "timezone", _without(body, "timezone"), frozenset({"timezone"})
        )
    if "cron" in body and "run_at" not in body:
        yield Variant("run_at or cron", "cron", _without(body, "cron"), recurrence)


def decision_takes_its_fields(props: dict[str, Schema], body: dict[str, Any]) -> Iterator[Variant]:
    """A pin needs the limits and failure limit it pins; a decline takes only its reason."""
    choices = props.get("decision", {}).get("enum", [])
    if body.get("decision") != "pin" or "decline" not in choices:
        return
    given = frozenset(body) - {"decision", "reason"}
    yield Variant("a decline takes only a reason", "decision", {**body, "decision": "decline"}, given)
    for name in sorted(given):
        yield Variant(f"a pin needs {name}", name, _without(body, name), frozenset({name}))


def distinct_items(props: dict[str, Schema], body: dict[str, Any]) -> Iterator[Variant]:
    """The items of a list (the alert thresholds) are each given once."""
    for name, schema in props.items():
        if schema.get("type") == "array" and isinstance(body.get(name), list) and body[name]:
            items = body[name]
            yield Variant(f"{name} distinct", name, {**body, name: [items[0], *items]}, frozenset({name}))


RULES: list[Callable[[dict[str, Schema], dict[str, Any]], Iterator[Variant]]] = [
    reserves_below_totals,
    cap_admits_a_run,
    one_recurrence,
    decision_takes_its_fields,
    distinct_items,
]


def body_component(operation: Schema) -> str | None:
    """The component name of an operation's JSON request body, or None."""
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
    ref: str | None = body.get("schema", {}).get("$ref")
    return ref.rsplit("/", 1)[-1] if ref else None


def variants(component: Schema, components: dict[str, Schema], body: dict[str, Any]) -> list[Variant]:
    """Every body breaking a rule that applies to `component`, made from the valid `body`."""
    props = properties(component, components)
    return [variant for rule in RULES for variant in rule(props, body)]


def model_variants(model: type[BaseModel], body: dict[str, Any]) -> list[Variant]:
    """Every body breaking a rule that applies to a pydantic model (a form's validator)."""
    schema = model.model_json_schema()
    return variants(schema, schema.get("$defs", {}), body)


def row_counts() -> dict[str, int]:
    """Rows of every model, to show a refused request wrote nothing."""
    return {model._meta.label: model._default_manager.count() for model in apps.get_models()}


def as_form(body: dict[str, Any]) -> dict[str, str]:
    """A body as the admin's flat form fields: limits.<field> becomes <field>; absent stays absent."""
    flat: dict[str, str] = {}
    for key, value in body.items():
        if isinstance(value, dict):
            flat.update({inner: str(item) for inner, item in value.items()})
        elif value is not None:
            flat[key] = str(value)
    return flat
