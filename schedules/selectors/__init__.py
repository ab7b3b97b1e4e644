"""Read-only queries and plain-language summaries for the owner's pages.

Every function here costs a fixed number of queries, whatever the number of rows, so the list
and detail pages stay fast on large tables. Writes never happen here; they go through services.
"""

from __future__ import annotations

from schedules.selectors.conversations import Thread, chat_conversations, conversation_thread
from schedules.selectors.requests import (
    cap_replay,
    recorded_runs,
    replay_report,
    request_page,
    schedule_requests,
    suggested_limits,
)
from schedules.selectors.runs import conversation_page, deletion_summary, run_page
from schedules.selectors.schedules import (
    Change,
    StatusPanel,
    diff,
    notification_attempts,
    pause_history,
    schedule_detail,
    schedule_list,
    status_panel,
)
from schedules.words import count_sentence, pause_explanation

__all__ = [
    "Change",
    "StatusPanel",
    "Thread",
    "cap_replay",
    "chat_conversations",
    "conversation_page",
    "conversation_thread",
    "count_sentence",
    "deletion_summary",
    "diff",
    "notification_attempts",
    "pause_explanation",
    "pause_history",
    "recorded_runs",
    "replay_report",
    "request_page",
    "run_page",
    "schedule_detail",
    "schedule_list",
    "schedule_requests",
    "status_panel",
    "suggested_limits",
]
