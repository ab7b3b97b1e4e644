"""The delegation step: a tool of the run (`agent.delegate`) starts a child run in the same process and
attempt, with what the parent has left outside its own reserve (docs/contract.md#run-limits). The
child is driven by the same loop and ends no later than its parent must."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from runs import services
from runs.limits import RunLimits, with_reserves
from runs.models import Agent, Run
from runs.providers import client_for
from runs.tools import ToolError

if TYPE_CHECKING:
    import httpx

    from runs.runtime import _Loop


def delegate(parent: _Loop, *, task: str, agent_name: str | None) -> Run:
    """Run `task` as a child of the parent loop's run, by the named agent or the parent's own."""
    run = parent.run
    agent = run.agent
    if agent_name and agent_name != agent.name:
        found = Agent.objects.filter(name=agent_name, is_active=True).first()
        if found is None:
            raise ToolError(f"there is no active agent named {agent_name!r}")
        agent = found
    run.refresh_from_db(fields=["steps", "model_calls", "tool_calls", "cost"])
    limits = child_limits(parent.limits, run.usage(), agent.limits)
    if limits is None:
        raise ToolError("not enough budget is left outside the synthesis reserve to delegate")
    child = services.create_run(
        run.owner_id,
        agent,
        task,
        conversation=run.conversation,
        limits=limits,
        kind=Run.Kind.DELEGATED,
        parent=run,
        attempt=run.attempt,
    )
    if agent.pk == run.agent.pk:
        return _run_child(parent, child, parent.client)
    with client_for(agent) as client:
        return _run_child(parent, child, client)


def _run_child(parent: _Loop, child: Run, client: httpx.Client) -> Run:
    from runs.runtime import execute_run  # the loop drives its children: a cycle by nature

    finished = execute_run(
        child,
        client=client,
        sleep=parent.sleep,
        heartbeat=False,
        deadline=parent.deadline,
        tools_http=parent.tools_http,
    )
    # The child's usage counts against the parent too (runs.steps wrote it to both rows): the
    # parent's loop plans its next call from counters read again.
    parent.run.refresh_from_db(fields=["steps", "model_calls", "tool_calls", "cost"])
    return finished


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
