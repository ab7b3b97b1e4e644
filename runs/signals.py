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
