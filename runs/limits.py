"""RunLimits: the one definition and validator of a run's hard limits and synthesis reserves.

Used by the runtime, the schedule policy, the forms, the admin and the API (docs/contract.md#run-limits).
                                                                                            # Stored as
one JSON value on each revision and each run; materialization copies the whole value, so a field
added here later needs no change to any copy.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
)

from accounting.money import MAX_AMOUNT, MONEY_PLACES, USD_PLACES, format_money, parse_money

Dimension = Literal["steps", "model_calls", "tool_calls", "cost"]
# The order in which a reserve names its dimension (docs/contract.md#the-run-loop, rule 5).
DIMENSIONS: tuple[Dimension, ...] = ("steps", "model_calls", "tool_calls", "cost")

M = TypeVar("M", bound=BaseModel)

MAX_COUNT = 10_000
MAX_COST = MAX_AMOUNT
STORED = {"stored": True}  # validation context of values read back from the database


def _places(info: ValidationInfo) -> int:
    return MONEY_PLACES if (info.context or {}).get("stored") else USD_PLACES


class RunLimits(BaseModel):
    """Immutable limits of one run. All-zero reserves mean exactly the pre-reserve behaviour."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_steps: StrictInt = Field(ge=1, le=MAX_COUNT)
    max_model_calls: StrictInt = Field(ge=1, le=MAX_COUNT)
    max_tool_calls: StrictInt = Field(ge=0, le=MAX_COUNT)
    max_cost: Decimal
    synthesis_reserve_steps: StrictInt = Field(ge=0, le=MAX_COUNT)
    synthesis_reserve_model_calls: StrictInt = Field(ge=0, le=MAX_COUNT)
    synthesis_reserve_tool_calls: StrictInt = Field(ge=0, le=MAX_COUNT)
    synthesis_reserve_cost: Decimal

    @field_validator("max_cost", mode="before")
    @classmethod
    def _max_cost_is_positive_money(cls, value: Any, info: ValidationInfo) -> Decimal:
        money = parse_money(value, "max_cost", places=_places(info))
        if money <= 0:
            raise ValueError("max_cost must be above 0")
        return money

    @field_validator("synthesis_reserve_cost", mode="before")
    @classmethod
    def _reserve_cost_is_money(cls, value: Any, info: ValidationInfo) -> Decimal:
        return parse_money(value, "synthesis_reserve_cost", places=_places(info))

    @field_validator(
        "synthesis_reserve_steps",
        "synthesis_reserve_model_calls",
        "synthesis_reserve_tool_calls",
        "synthesis_reserve_cost",
    )
    @classmethod
    def _reserve_is_below_its_total(cls, value: int | Decimal, info: ValidationInfo) -> int | Decimal:
        assert info.field_name is not None
        total_field = "max_" + info.field_name.removeprefix("synthesis_reserve_")
        total = info.data.get(total_field)
        if total is None:  # the total itself was invalid and already has its own message
            return value
        if value > 0 and value >= total:
            shown = (
                (format_money(value), format_money(total)) if isinstance(value, Decimal) else (value, total)
            )
            raise ValueError(f"{info.field_name} must be below {total_field} ({shown[0]} ≥ {shown[1]})")
        return value

    @field_serializer("max_cost", "synthesis_reserve_cost")
    def _money_as_string(self, value: Decimal) -> str:
        return format_money(value)

    # -- reading it ---------------------------------------------------------------------------

    def total(self, dimension: Dimension) -> int | Decimal:
        return getattr(self, f"max_{dimension}")  # type: ignore[no-any-return]

    def reserve(self, dimension: Dimension) -> int | Decimal:
        return getattr(self, f"synthesis_reserve_{dimension}")  # type: ignore[no-any-return]

    @property
    def has_reserves(self) -> bool:
        return any(self.reserve(d) > 0 for d in DIMENSIONS)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """A stored value (a revision's, a run's): amounts our own code computed may have more
        places than a person may type."""
        return cls.model_validate(data, context=STORED)


LIMIT_FIELDS: tuple[str, ...] = tuple(RunLimits.model_fields)
# What each field is called for people (forms, the admin, diffs); the JSON names stay the API's.
LIMIT_LABELS: dict[str, str] = {
    "max_steps": "Max steps",
    "max_model_calls": "Max model calls",
    "max_tool_calls": "Max tool calls",
    "max_cost": "Max cost (USD)",
    "synthesis_reserve_steps": "Synthesis reserve — steps",
    "synthesis_reserve_model_calls": "Synthesis reserve — model calls",
    "synthesis_reserve_tool_calls": "Synthesis reserve — tool calls",
    "synthesis_reserve_cost": "Synthesis reserve — cost (USD)",
}


class InvalidFields(ValueError):
    """Input refused, with one plain message per field (`fields`: {field: message})."""

    def __init__(self, fields: dict[str, str]) -> None:
        self.fields = fields
        super().__init__("; ".join(fields.values()))


class InvalidLimits(InvalidFields):
    """Limits that fail validation."""


def parse(
    model: type[M], data: Any, refusal: type[InvalidFields], *, context: dict[str, Any] | None = None
) -> M:
    """`model` from untrusted `data`, or `refusal` naming each bad field in the words every surface
    shows (field_errors)."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise refusal(field_errors(exc)) from None


def field_errors(exc: ValidationError) -> dict[str, str]:
    """Pydantic's errors as {field: "field must ..."}: the wording every surface shows."""
    fields: dict[str, str] = {}
    for error in exc.errors():
        loc = [str(part) for part in error["loc"] if not isinstance(part, int)]
        field = ".".join(loc) or "__all__"
        if field in fields:
            continue
        fields[field] = describe_error(field, error)
    return fields


def describe_error(field: str, error: Any) -> str:
    """One pydantic error in the product's words: "max_steps must be at least 1"."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "value_error":
        message = str(ctx.get("error", error["msg"]))
        return message if message.startswith(field.rsplit(".", 1)[-1]) else f"{field} {message}"
    if kind == "missing":
        return f"{field} is required"
    if kind == "extra_forbidden":
        return f"{field} is not a recognised field"
    if kind in ("literal_error", "enum"):
        return f"{field} must be one of {ctx.get('expected', 'the documented values')}"
    if kind == "greater_than_equal":
        return f"{field} must be at least {ctx.get('ge')}"
    if kind == "greater_than":
        return f"{field} must be above {ctx.get('gt')}"
    if kind == "less_than_equal":
        return f"{field} must be at most {ctx.get('le')}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"{field} must be a whole number"
    if kind in ("string_type", "string_too_short"):
        return f"{field} must be non-empty text"
    if kind == "timezone_aware":
        return f"{field} must include a UTC offset, e.g. 2026-09-03T09:00:00+03:00"
    if kind in ("datetime_parsing", "datetime_from_date_parsing", "datetime_type"):
        return f"{field} must be an ISO 8601 date and time, e.g. 2026-09-03T09:00:00+03:00"
    if kind == "string_too_long":
        return f"{field} must be at most {ctx.get('max_length')} characters"
    return f"{field}: {error['msg']}"


def validate_limits(data: Any, *, stored: bool = False) -> RunLimits:
    """RunLimits from untrusted input (or, `stored`, a value read back from the database, whose
    amounts may have more places than a person types), or InvalidLimits naming each bad field."""
    return parse(RunLimits, data, InvalidLimits, context=STORED if stored else None)


def with_reserves(
    limits: RunLimits, *, steps: int, model_calls: int, tool_calls: int, cost: Decimal
) -> RunLimits:
    """A copy with these reserves, each kept only when strictly below its total, else 0
    (docs/decisions/0002, point 2), so a small total still yields a valid definition."""

    def keep(reserve: int | Decimal, total: int | Decimal) -> int | Decimal:
        return reserve if 0 < reserve < total else type(reserve)(0)

    return limits.model_copy(
        update={
            "synthesis_reserve_steps": keep(steps, limits.max_steps),
            "synthesis_reserve_model_calls": keep(model_calls, limits.max_model_calls),
            "synthesis_reserve_tool_calls": keep(tool_calls, limits.max_tool_calls),
            "synthesis_reserve_cost": keep(cost, limits.max_cost),
        }
    )


class BudgetState(BaseModel):
    """What the loop may do next, from limits and usage alone (docs/contract.md#the-run-loop, rule 1-2)."""

    model_config = ConfigDict(frozen=True)

    exhausted: Dimension | None  # a hard limit used up: the run fails budget_exhausted
    synthesis: Dimension | None  # the request is synthesis-only; names the dimension


def budget_state(limits: RunLimits, usage: dict[str, int | Decimal]) -> BudgetState:
    remaining = {d: limits.total(d) - usage[d] for d in DIMENSIONS}
    exhausted = next((d for d in ("steps", "model_calls", "cost") if remaining[d] <= 0), None)

    def activates(d: Dimension) -> bool:
        if d == "tool_calls" and remaining[d] <= 0:
            return True  # an exhausted tool budget owes one synthesis-only turn (docs/decisions/0001,
            # amendment)
        return limits.reserve(d) > 0 and remaining[d] <= limits.reserve(d)

    synthesis = next((d for d in DIMENSIONS if activates(d)), None)
    return BudgetState(exhausted=exhausted, synthesis=synthesis)  # type: ignore[arg-type]


def tool_calls_that_fit(limits: RunLimits, used: int) -> int:
    """Tool calls a response may still run: the remainder above the tool-call reserve, which stays free
    for nothing but synthesis (docs/decisions/0001: no tool call inside the reserve)."""
    return max(0, limits.max_tool_calls - used - limits.synthesis_reserve_tool_calls)
