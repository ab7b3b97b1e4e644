"""Runs the tick inserted in bulk held the JSON value `null` in open_call where the ORM writes SQL
NULL: `open_call IS NULL` is how a run says no call is on the wire, so those become SQL NULL."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0010_run_provider_status_index"),
    ]

    operations = [
        migrations.RunSQL(
            "UPDATE runs_run SET open_call = NULL WHERE open_call = 'null'::jsonb",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
