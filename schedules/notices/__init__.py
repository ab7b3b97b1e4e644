"""Telling the owner things: one outbox (the Notice table), one delivery path, a module per kind.

- `paused`: a schedule paused itself; `decided`: a request for new limits was pinned or declined;
  `completed`: a scheduled run completed and its owner asked to hear about it; `budget`: spend
  crossed an alert threshold of a ceiling; `capped`: a slot was skipped at its schedule's monthly
  cap. Each says what it tells, to whom and on which channels, and writes its Notice row in the
  transaction of what it tells.
- `delivery`: the minute `notify` task's one path: claim, send by email and signed webhook (retry
  with backoff), record every attempt, mark sent.
- `channels`: the owner's channels and the webhook's signing secret.
"""

from __future__ import annotations

from schedules.notices import budget, capped, completed, decided, paused
from schedules.notices.channels import (
    InvalidNotificationSettings,
    check_webhook_url,
    rotate_webhook_secret,
    settings_for,
    sign,
    update_notification_settings,
)
from schedules.notices.delivery import (
    NOTICE_LEASE,
    SIGNATURE_HEADER,
    WEBHOOK_ATTEMPTS,
    deliver,
    deliver_pending,
    drain_outbox,
    send_test_notification,
)
from schedules.notices.message import Message

__all__ = [
    "NOTICE_LEASE",
    "SIGNATURE_HEADER",
    "WEBHOOK_ATTEMPTS",
    "InvalidNotificationSettings",
    "Message",
    "budget",
    "capped",
    "check_webhook_url",
    "completed",
    "decided",
    "deliver",
    "deliver_pending",
    "drain_outbox",
    "paused",
    "rotate_webhook_secret",
    "send_test_notification",
    "settings_for",
    "sign",
    "update_notification_settings",
]
