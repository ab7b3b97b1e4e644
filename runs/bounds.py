"""Bounded before the call, charged as billed after it (docs/contract.md#bounded-before-the-call).

Before each model request the loop knows the most the call can cost: an upper bound on its input
tokens (the previous call's reported input plus the bytes added since; a token is at least one
byte) at the dearest input rate that could apply (a cache write, a long-context tier), plus the
output cap at the output rate. It sets the output cap from the dollars it may spend, so that worst
case fits; where not even MIN_OUTPUT_TOKENS fit, no call is made. After the call the ledger
records what the provider bills: its reported charge if it reports one, else the price sheet's
figure; a response without usable usage is charged the worst case.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal
from typing import Any

from django.conf import settings

from runs.pricing import MICRO, MILLION, PriceSheet
from runs.providers.base import Message, ModelRequest, Usage


@dataclass(frozen=True)
class CallPlan:
    """A request with its output cap, and what it can cost at most."""

    request: ModelRequest
    synthesis: str | None  # the dimension that made it synthesis-only, if it is
    input_bound: int
    cap: int
    ceiling: int  # the agent's maximum output per call, which the cap never exceeds
    worst: Decimal  # USD, rounded up to the ledger's micro-dollar
    worst_by_kind: dict[str, Decimal]
    input_worst: Decimal  # USD, exact: the input bound at the dearest input rate
    output_rate: Decimal  # USD per million output tokens, margin included

    def as_json(self) -> dict[str, Any]:
        """What the ledger entry records of the bound its call was made under."""
        return {"input_tokens": self.input_bound, "output_cap": self.cap, "worst": str(self.worst)}

    @property
    def capped_by_dollars(self) -> bool:
        """The cap is below the agent's maximum output: the dollars left set it, not the agent."""
        return self.cap < self.ceiling

    def estimate(self, output_tokens: int) -> tuple[Decimal, dict[str, Decimal]]:
        """What a call cut before its usage arrived is charged (docs/decisions/0006-streaming.md):
        the input bound at the dearest input rate and `output_tokens` (at most the cap) at the output
        rate, rounded up to the micro-dollar: never less than the provider can have billed for
        that much output, never more than the bound."""
        output = Decimal(min(output_tokens, self.cap)) * self.output_rate / MILLION
        cost = min((self.input_worst + output).quantize(MICRO, rounding=ROUND_CEILING), self.worst)
        return cost, split({"input": self.input_worst, "output": output}, cost)


# What a chat template adds around each message (role markers, separators), counted generously:
# providers count those tokens as input too, and the bound must not fall short of them.
MESSAGE_OVERHEAD_BYTES = 32


def _message_json(message: Message) -> list[Any]:
    calls = [[call.id, call.name, call.arguments, call.raw_arguments] for call in message.tool_calls]
    return [message.role, message.content, calls, message.tool_call_id, message.tool_name]


def _bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))


def _messages_bytes(messages: Iterable[Message]) -> int:
    listed = [_message_json(m) for m in messages]
    return _bytes(listed) + MESSAGE_OVERHEAD_BYTES * len(listed)


def request_bytes(request: ModelRequest) -> int:
    """Every byte of text the request carries (system prompt, messages, tool schemas, the
    synthesis instruction) with JSON punctuation and a template's worth of bytes around each
    message: more than its input tokens, since a token is at least a byte."""
    tools = [[tool.name, tool.description, tool.parameters] for tool in request.tools]
    return (
        _bytes([request.system, tools, request.synthesis_instruction or ""])
        + MESSAGE_OVERHEAD_BYTES * (len(tools) + 1)
        + _messages_bytes(request.messages)
    )


def added_bytes(messages: list[Message], instruction: str | None) -> int:
    """The bytes a request adds to the previous one: its new messages, and the synthesis
    instruction (which the previous request never carried)."""
    return _messages_bytes(messages) + _bytes(instruction or "") + MESSAGE_OVERHEAD_BYTES


def plan_call(
    sheet: PriceSheet,
    kinds: tuple[str, ...],
    request: ModelRequest,
    *,
    input_bound: int,
    budget: Decimal,
    synthesis: str | None,
    ceiling: int,
) -> CallPlan | None:
    """The request with the largest output cap whose worst case fits in `budget` (USD), at most
    `ceiling` (the agent's maximum output per call); None when not even MIN_OUTPUT_TOKENS (or the
    ceiling, if lower) fit. Rates of a provider that reports its own charge get REPORTED_COST_MARGIN
    on top: what it reports may exceed the catalogue's."""
    margin = 1 + (settings.REPORTED_COST_MARGIN if sheet.reports_cost else Decimal(0))
    input_rate = sheet.worst_input_rate(input_bound, kinds) * margin
    output_rate = sheet.worst_output_rate(input_bound) * margin
    input_worst = Decimal(input_bound) * input_rate / MILLION
    left = budget - input_worst
    if left <= 0:
        return None
    cap = ceiling
    if output_rate > 0:
        cap = min(cap, int((left * MILLION / output_rate).to_integral_value(rounding=ROUND_FLOOR)))
    if cap < min(settings.MIN_OUTPUT_TOKENS, ceiling):
        return None
    output_worst = Decimal(cap) * output_rate / MILLION
    worst = (input_worst + output_worst).quantize(MICRO, rounding=ROUND_CEILING)
    return CallPlan(
        request=dataclasses.replace(request, max_output_tokens=cap),
        synthesis=synthesis,
        input_bound=input_bound,
        cap=cap,
        ceiling=ceiling,
        worst=worst,
        worst_by_kind=split({"input": input_worst, "output": output_worst}, worst),
        input_worst=input_worst,
        output_rate=output_rate,
    )


def split(exact: dict[str, Decimal], total: Decimal) -> dict[str, Decimal]:
    """`total` split by kind in the proportions of `exact`, to the micro-dollar, summing to it
    exactly (the rounding lands on the largest part)."""
    whole = sum(exact.values(), Decimal(0))
    if whole == 0:
        parts = {kind: Decimal(0) for kind in exact}
        parts[max(exact, key=lambda k: k == "output")] = total
        return parts
    parts = {
        kind: (amount * total / whole).quantize(MICRO, rounding=ROUND_HALF_EVEN)
        for kind, amount in exact.items()
    }
    largest = max(parts, key=lambda kind: parts[kind])
    parts[largest] += total - sum(parts.values(), Decimal(0))
    return parts


@dataclass(frozen=True)
class Billed:
    """What a call is charged: `cost` (reported, else computed), the computed figure, the provider's
    reported one, and `cost` split by kind."""

    cost: Decimal
    computed: Decimal
    reported: Decimal | None
    by_kind: dict[str, Decimal]


def bill(sheet: PriceSheet, usage: Usage) -> Billed:
    charge = sheet.charge(usage)
    computed = charge.total
    reported = None
    cost = computed
    if usage.reported_cost is not None:
        reported = usage.reported_cost.quantize(MICRO, rounding=ROUND_CEILING)
        cost = reported  # what the provider says it charged wins; ours is kept beside it
    return Billed(cost=cost, computed=computed, reported=reported, by_kind=split(charge.by_kind, cost))
