"""The delegation step: a tool of the run (`agent.delegate`) starts a child run in the same process and
attempt, with what the parent has left outside its own reserve (docs/contract.md#run-limits). The
child is driven by the same loop, which the loop hands in (`drive`: runs.runtime, the higher
module, calls this one), and ends no later than its parent must."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import httpx

from runs import services
from runs.limits import RunLimits, with_reserves
from runs.models import Agent, Run
from runs.providers import client_for
from runs.tools import ToolError

Drive = Callable[[Run, httpx.Client], Run]  # drives a child run to its end with a provider client


def delegate(
    run: Run, limits: RunLimits, client: httpx.Client, drive: Drive, *, task: str, agent_name: str | None
) -> Run:
    """Run `task` as a child of `run` (whose limits are `limits`), by the named agent or the run's
    own, driven by `drive`: with `client` when the child has the run's agent, else with its own."""
    agent = run.agent
    if agent_name and agent_name != agent.name:
        found = Agent.objects.filter(name=agent_name, is_active=True).first()
        if found is None:
            raise ToolError(f"there is no active agent named {agent_name!r}")
        agent = found
    run.refresh_from_db(fields=["steps", "model_calls", "tool_calls", "cost"])
    given = child_limits(limits, run.usage(), agent.limits)
    if given is None:
        raise ToolError("not enough budget is left outside the synthesis reserve to delegate")
    child = services.create_run(
        run.owner_id,
        agent,
        task,
        conversation=run.conversation,
        limits=given,
        kind=Run.Kind.DELEGATED,
        parent=run,
        attempt=run.attempt,
    )
    if agent.pk == run.agent.pk:
        return drive(child, client)
    with client_for(agent) as own:
        return drive(child, own)


def child_limits(parent: RunLimits, used: dict[str, int | Decimal], defaults: RunLimits) -> RunLimits | None:
    """A delegated child's limits: no larger than what the parent has left outside its own
    reserve (so the parent keeps its synthesis headroom), nor than the child agent's defaults.
    The parent's reserves carry over where they still fit. None when nothing is left."""
    available = {
        d: parent.total(d) - used[d] - parent.reserve(d)
        for d in ("steps", "model_calls", "tool_calls", "cost")
    }
    if min(available["steps"], available["model_calls"]) < 1 or available["cost"] <= 0:
        return None
    totals = RunLimits(
        max_steps=int(min(defaults.max_steps, available["steps"])),
        max_model_calls=int(min(defaults.max_model_calls, available["model_calls"])),
        max_tool_calls=int(max(0, min(defaults.max_tool_calls, available["tool_calls"]))),
        max_cost=min(defaults.max_cost, Decimal(available["cost"])),
        synthesis_reserve_steps=0,
        synthesis_reserve_model_calls=0,
        synthesis_reserve_tool_calls=0,
        synthesis_reserve_cost=Decimal(0),
    )
    return with_reserves(
        totals,
        steps=parent.synthesis_reserve_steps,
        model_calls=parent.synthesis_reserve_model_calls,
        tool_calls=parent.synthesis_reserve_tool_calls,
        cost=parent.synthesis_reserve_cost,
    )
