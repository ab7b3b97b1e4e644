"""Every schedule state transition, each one transaction with its audit row (docs/contract.md#schedules,
docs/decisions/0002), one module per subject:

- definitions: creating schedules, updates, explicit revisions, the chat policy and per-owner caps
- requests: an owner asks for new limits; an admin pins from the request or declines it
- pausing: pause, resume, complete
- outcomes: a scheduled run's end on its occurrence and schedule, and its accounting event

Views, admin actions, API handlers, chat tools and tasks parse input, check ownership and call
exactly one of these.
"""

from __future__ import annotations

from schedules.services.definitions import (
    CHAT,
    CREATE_DEFAULT_COST,
    CREATE_FAILURE_LIMIT,
    CREATE_RESERVE_COST,
    CREATE_RESERVE_MODEL_CALLS,
    CREATE_RESERVE_STEPS,
    CREATE_RESERVE_TOOL_CALLS,
    MAX_RUN_AT_AHEAD,
    PIN_PERMISSION,
    CheckedCreate,
    NotActive,
    NotPaused,
    RevisionChanged,
    ScheduleCompleted,
    ScheduleLimit,
    check_create,
    check_room,
    create_policy_limits,
    create_schedule,
    is_admin,
    pin_revision,
    update_schedule,
)
from schedules.services.outcomes import (
    record_run_outcome,
    run_accounted_payload,
)
from schedules.services.pausing import (
    complete_schedules,
    pause_for_invalid_definition,
    pause_schedule,
    resume_schedule,
)
from schedules.services.requests import (
    RequestAlreadyOpen,
    RequestDecided,
    decline_request,
    pin_from_request,
    request_revision,
)

__all__ = [
    "CHAT",
    "CREATE_DEFAULT_COST",
    "CREATE_FAILURE_LIMIT",
    "CREATE_RESERVE_COST",
    "CREATE_RESERVE_MODEL_CALLS",
    "CREATE_RESERVE_STEPS",
    "CREATE_RESERVE_TOOL_CALLS",
    "MAX_RUN_AT_AHEAD",
    "PIN_PERMISSION",
    "CheckedCreate",
    "NotActive",
    "NotPaused",
    "RequestAlreadyOpen",
    "RequestDecided",
    "RevisionChanged",
    "ScheduleCompleted",
    "ScheduleLimit",
    "check_create",
    "check_room",
    "complete_schedules",
    "create_policy_limits",
    "create_schedule",
    "decline_request",
    "is_admin",
    "pause_for_invalid_definition",
    "pause_schedule",
    "pin_from_request",
    "pin_revision",
    "record_run_outcome",
    "request_revision",
    "resume_schedule",
    "run_accounted_payload",
    "update_schedule",
]
