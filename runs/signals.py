"""`run_finished` is sent inside the transaction that writes a run's terminal state.

Receivers write in that same transaction: the schedules app records the occurrence outcome and
`schedule.run_accounted` there (SPEC §5), without the run layer knowing schedules exist.
"""

from __future__ import annotations

from django.dispatch import Signal

# Sent with `run` (the Run, terminal, refreshed) by runs.services.finish_run.
run_finished = Signal()
