"""What other limits would have done to a recorded run: the run loop's budget rules
(docs/contract.md#the-run-loop, `runs.limits.budget_state`) replayed over the usage each of its steps
recorded.

It is an estimate, and the pages say so: a model answers differently once it is told to
synthesize, and a run that was stopped early leaves no record of what it would have done next.
The replay assumes a synthesis-only turn is answered (the instruction is obeyed) and never guesses
steps the record does not have.

Each call is bounded before it is made (docs/contract.md#bounded-before-the-call): a call is made only
when the dollars it may spend pay for it, the dollars outside the cost reserve for a turn that is not
synthesis-only. The replay takes a step's recorded cost as what it needed, and the dearest recorded step
as what the next one would have needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from runs.limits import Dimension, RunLimits, budget_state, tool_calls_that_fit

ESTIMATE_NOTE = (
    "An estimate from each run's recorded usage per step: a model answers differently once it is "
    "told to write its final answer, and a run that was stopped leaves no record of what came next."
)


@dataclass(frozen=True)
class Step:
    """One recorded step: what its model call cost and how many tool calls it asked for (0 is an
    answer)."""

    cost: Decimal
    tool_calls: int


class Ending(StrEnum):
    """How the recorded run ended, as far as its limits are concerned."""

    ANSWERED = "answered"  # a final answer: the last step asked for no tool
    LIMITS = "limits"  # stopped by its limits (budget exhausted, synthesis reserve violated)
    OTHER = "other"  # a provider error, a timeout, a lost worker, a cancellation


class Verdict(StrEnum):
    FITS = "fits"  # answers within the limits, never told to synthesize
    SYNTHESIS = "synthesis"  # told to answer at `step` (the reserve of `dimension` was reached)
    EXHAUSTED = "exhausted"  # a hard limit (`dimension`) used up before `step`, without an answer
    CONTINUES = "continues"  # goes past the end of the record, where nothing more is known
    UNCHANGED = "unchanged"  # the limits were not what stopped it
    NO_USAGE = "no_usage"  # no model call was ever answered: limits make no difference


@dataclass(frozen=True)
class Replay:
    verdict: Verdict
    step: int | None = None
    dimension: Dimension | None = None
    usage: dict[str, int | Decimal] = field(default_factory=dict)

    @property
    def cost(self) -> Decimal:
        return Decimal(self.usage.get("cost", 0))


def replay(limits: RunLimits, steps: Sequence[Step], *, ending: Ending) -> Replay:
    """The recorded `steps` under `limits`, one model request at a time, as the loop decides."""
    used: dict[str, int | Decimal] = {"steps": 0, "model_calls": 0, "tool_calls": 0, "cost": Decimal(0)}
    if not steps:
        return Replay(Verdict.NO_USAGE, usage=used)
    for number, step in enumerate(steps, start=1):
        state = budget_state(limits, used)
        if state.exhausted:
            return Replay(Verdict.EXHAUSTED, number, state.exhausted, used)
        if not state.synthesis and (stop := _dollars_stop(limits, used, step.cost, number)):
            return stop
        used["steps"] = int(used["steps"]) + 1
        used["model_calls"] = int(used["model_calls"]) + 1
        used["cost"] = Decimal(used["cost"]) + step.cost
        if state.synthesis:
            return Replay(Verdict.SYNTHESIS, number, state.synthesis, used)
        runnable = min(step.tool_calls, tool_calls_that_fit(limits, int(used["tool_calls"])))
        used["tool_calls"] = int(used["tool_calls"]) + runnable
    if ending == Ending.ANSWERED:
        return Replay(Verdict.FITS, len(steps), usage=used)
    if ending == Ending.OTHER:
        return Replay(Verdict.UNCHANGED, len(steps), usage=used)
    # The record ends where the old limits stopped it: what would the next request have been?
    state = budget_state(limits, used)
    following = len(steps) + 1
    if state.exhausted:
        return Replay(Verdict.EXHAUSTED, following, state.exhausted, used)
    if state.synthesis:
        return Replay(Verdict.SYNTHESIS, following, state.synthesis, used)
    needed = max(step.cost for step in steps)
    if stop := _dollars_stop(limits, used, needed, following):
        return stop
    return Replay(Verdict.CONTINUES, following, usage=used)


def _dollars_stop(
    limits: RunLimits, used: dict[str, int | Decimal], needed: Decimal, number: int
) -> Replay | None:
    """Where the dollars stop a turn that is not synthesis-only and needs `needed`: outside the
    cost reserve there is not enough, so the owed synthesis turn comes (if the whole of what is
    left pays for it), or the cost limit is used up."""
    left = limits.max_cost - Decimal(used["cost"])
    if left - limits.synthesis_reserve_cost >= needed:
        return None
    if limits.synthesis_reserve_cost > 0 and left >= needed:
        return Replay(Verdict.SYNTHESIS, number, "cost", used)
    return Replay(Verdict.EXHAUSTED, number, "cost", used)
