"""The representations follow the models: a field or a choice added there must appear here too,
or rendering it would fail instead of answering."""

from __future__ import annotations

from typing import get_args

import pytest

from runs.limits import DIMENSIONS, LIMIT_FIELDS
from runs.models import Run
from schedules.api import representations as out
from schedules.models import Occurrence, PauseEvent, Schedule, ScheduleRevision


def test_the_limits_representation_has_every_runlimits_field():
    assert tuple(out.Limits.model_fields) == LIMIT_FIELDS


@pytest.mark.parametrize(
    ("model", "field", "choices"),
    [
        (out.Schedule, "kind", Schedule.Kind.values),
        (out.Schedule, "status", Schedule.Status.values),
        (out.Revision, "path", ScheduleRevision.Path.values),
        (out.Pause, "reason", PauseEvent.Reason.values),
        (out.Occurrence, "outcome", Occurrence.Outcome.values),
        (out.Run, "kind", Run.Kind.values),
        (out.Run, "status", Run.Status.values),
        (out.Synthesis, "dimension", list(DIMENSIONS)),
    ],
)
def test_every_choice_of_the_model_is_a_value_of_the_representation(model, field, choices):
    assert set(get_args(model.model_fields[field].annotation)) == set(choices)
