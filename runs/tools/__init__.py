"""A registry of typed tools: pydantic arguments, JSON schema exported to both providers.

Apps register their tools at start-up (runs registers clock.now, http.fetch and agent.delegate;
schedules registers schedule.create and schedule.update), so the run layer never imports the
layers above it. A tool's failure is a ToolError whose message the model sees as the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from accounting.selectors import owner_timezone, zone_or_default
from runs.limits import field_errors
from runs.models import Agent, Run
from runs.providers.base import ToolCall, ToolSpec


class ToolError(Exception):
    """A tool could not do what was asked; the message becomes the tool result."""


@dataclass
class ToolContext:
    run: Run
    agent: Agent
    http: httpx.Client
    # Runs a delegated child to its end and returns it (provided by the runtime).
    delegate: Callable[..., Run]
    _owner_timezone: str = ""

    @property
    def owner_timezone(self) -> str:
        """The owner's time zone, read once per run (with the run's first call, runs.steps.open_call)."""
        if not self._owner_timezone:
            self._owner_timezone = owner_timezone(self.run.owner_id)
        return self._owner_timezone

    def knows_owner_timezone(self, stored: str) -> None:
        """The owner's time zone as their budget row stores it ("" without one), read already."""
        self._owner_timezone = zone_or_default(stored)


@dataclass(frozen=True)
class Tool:
    name: str  # dotted, as people say it: "schedule.create"
    description: str
    arguments: type[BaseModel]
    handler: Callable[[Any, ToolContext], str]
    # Answers at once from what the run already holds: no network, no write, no child run. The
    # loop then writes the step before it together with the next call's opening (runs.runtime).
    instant: bool = False

    @property
    def wire_name(self) -> str:
        """Provider function names allow only [A-Za-z0-9_-]: "schedule.create" -> "schedule_create"."""
        return self.name.replace(".", "_")

    def spec(self) -> ToolSpec:
        return _spec(self)


@cache
def _spec(tool: Tool) -> ToolSpec:
    """A tool as offered to a model. Made once per process: exporting a JSON schema is not free,
    and every run of every agent offers the same tools."""
    schema = tool.arguments.model_json_schema()
    schema.pop("title", None)
    return ToolSpec(name=tool.wire_name, description=tool.description, parameters=schema)


_REGISTRY: dict[str, Tool] = {}


def register(tool: Tool) -> Tool:
    _REGISTRY[tool.name] = tool
    return tool


def tools_for(agent: Agent) -> list[Tool]:
    """The agent's enabled tools that exist, in the agent's order."""
    names = agent.tools if isinstance(agent.tools, list) else []
    return [_REGISTRY[name] for name in names if isinstance(name, str) and name in _REGISTRY]


def invoke(call: ToolCall, enabled: list[Tool], context: ToolContext) -> tuple[str, bool]:
    """Run one tool call: (result text, is_error). Never raises for the model's mistakes."""
    tool = next((t for t in enabled if t.wire_name == call.name), None)
    if tool is None:
        return f"Error: there is no tool named {call.name!r} available to this agent.", True
    if call.arguments is None:
        return f"Error: the arguments for {tool.name} must be a JSON object.", True
    try:
        arguments = tool.arguments.model_validate(call.arguments)
    except ValidationError as exc:
        problems = "; ".join(field_errors(exc).values())
        return f"Error: invalid arguments for {tool.name}: {problems}", True
    try:
        return tool.handler(arguments, context), False
    except ToolError as exc:
        return f"Error: {exc}", True
