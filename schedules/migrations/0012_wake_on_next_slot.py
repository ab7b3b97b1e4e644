"""A schedule's next slot, written (created, resumed, edited, advanced by the tick), wakes every
worker's waker at commit (schedules.waker), so a slot that comes due soon is ticked at its moment.
A statement trigger, so that every path that writes the slot is covered, the tick's bulk writes
included, with one notification per statement (PostgreSQL folds repeated ones per transaction)."""

from django.db import migrations

FORWARD = """
CREATE FUNCTION schedules_wake_on_next_slot() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('runs_wake', '');
    RETURN NULL;
END $$;
CREATE TRIGGER schedule_next_slot_written
    AFTER INSERT OR UPDATE OF next_occurrence_at ON schedules_schedule
    FOR EACH STATEMENT EXECUTE FUNCTION schedules_wake_on_next_slot();
"""
BACKWARD = """
DROP TRIGGER IF EXISTS schedule_next_slot_written ON schedules_schedule;
DROP FUNCTION IF EXISTS schedules_wake_on_next_slot();
"""


class Migration(migrations.Migration):
    dependencies = [("schedules", "0011_forecast_inputs")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
