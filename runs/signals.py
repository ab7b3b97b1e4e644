"""`run_claimed` is sent inside the transaction that claims a queued run, `run_finished` inside the
transaction that writes a run's terminal state.

Receivers write in that same transaction: the schedules app records the occurrence outcome and
`schedule.run_accounted` there (docs/contract.md#schedules), without the run layer knowing schedules
exist.
"""

from __future__ import annotations

from django.dispatch import Signal

# Sent with `run` (now running, under `attempt`) by runs.inflight.claim_next, in its transaction:
# the schedules app marks the run's occurrence running there.
run_claimed = Signal()

# Sent with `run` (the Run, terminal, refreshed) by runs.services.finish_run.
run_finished = Signal()

# Sent with `run` (refreshed, no longer in flight) and `usage` (the late response's steps,
# model_calls, tool_calls and cost) when a provider response arrived after the run ended: the
# ledger and the run's counters already include it, inside the same transaction.
late_usage_recorded = Signal()
