"""What a notice says: an email subject and text, and the webhook's JSON payload."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Message:
    subject: str
    text: str
    payload: dict[str, Any]
