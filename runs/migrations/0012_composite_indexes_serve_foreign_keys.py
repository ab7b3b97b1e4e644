"""Runs and transcript rows lose the single-column indexes a composite index already leads with
(owner, conversation, status, a transcript row's run) and the parent's becomes partial (most runs
have none): every index costs each run's claim and end a write. The database only drops indexes
(the foreign keys stay as they are, not re-validated over every row); the state says db_index=False."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ('runs', '0011_open_call_sql_null'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "runs_run_owner_id_b1defaec"',
                    reverse_sql='CREATE INDEX "runs_run_owner_id_b1defaec" ON "runs_run" ("owner_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "runs_run_conversation_id_9437524e"',
                    reverse_sql='CREATE INDEX "runs_run_conversation_id_9437524e" ON "runs_run" ("conversation_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "runs_run_parent_id_8594b290"',
                    reverse_sql='CREATE INDEX "runs_run_parent_id_8594b290" ON "runs_run" ("parent_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "runs_run_status_7f93e232"',
                    reverse_sql='CREATE INDEX "runs_run_status_7f93e232" ON "runs_run" ("status")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "runs_run_status_7f93e232_like"',
                    reverse_sql='CREATE INDEX "runs_run_status_7f93e232_like" ON "runs_run" ("status" varchar_pattern_ops)',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "runs_transcriptentry_run_id_9014b947"',
                    reverse_sql='CREATE INDEX "runs_transcriptentry_run_id_9014b947" ON "runs_transcriptentry" ("run_id")',
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name='run',
                    name='conversation',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='runs.conversation'),
                ),
                migrations.AlterField(
                    model_name='run',
                    name='owner',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='runs', to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name='run',
                    name='parent',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='children', to='runs.run'),
                ),
                migrations.AlterField(
                    model_name='run',
                    name='status',
                    field=models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('completed', 'Completed'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], default='queued', max_length=16),
                ),
                migrations.AlterField(
                    model_name='transcriptentry',
                    name='run',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='transcript', to='runs.run'),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('parent__isnull', False)), fields=['parent'], name='run_children'),
        ),
    ]
