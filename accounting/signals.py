"""`thresholds_crossed` is sent inside the transaction that recorded budget alerts (accounting.alerts),
with `owner_id` and `alert_ids`: the schedules app writes the owner's notice there, without the
accounting layer knowing notices exist."""

from __future__ import annotations

from django.dispatch import Signal

thresholds_crossed = Signal()
