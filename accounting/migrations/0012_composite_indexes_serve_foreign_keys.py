"""Ledger entries and rollups lose the owner's own index: ledger_owner_time and the unique buckets
lead with the owner and serve the same lookups, and each index costs every step a write. The
database only drops indexes (the foreign keys are not re-validated); the state says db_index=False."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ('accounting', '0011_streamed_calls'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "accounting_ledgerentry_owner_id_3d971f09"',
                    reverse_sql='CREATE INDEX "accounting_ledgerentry_owner_id_3d971f09" ON "accounting_ledgerentry" ("owner_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "accounting_spendrollup_owner_id_31fa1eda"',
                    reverse_sql='CREATE INDEX "accounting_spendrollup_owner_id_31fa1eda" ON "accounting_spendrollup" ("owner_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "accounting_usagerollup_owner_id_10f2b814"',
                    reverse_sql='CREATE INDEX "accounting_usagerollup_owner_id_10f2b814" ON "accounting_usagerollup" ("owner_id")',
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name='ledgerentry',
                    name='owner',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name='spendrollup',
                    name='owner',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name='usagerollup',
                    name='owner',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL),
                ),
            ],
        ),
    ]
