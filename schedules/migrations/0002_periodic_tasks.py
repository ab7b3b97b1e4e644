"""The two periodic django-q2 tasks: the tick and the reaper, every minute.

Created idempotently by name; the django-q2 admin is read-only, so nobody edits them by hand.
"""

from django.db import migrations

PERIODIC = [
    ("schedules.tick", "schedules.tasks.tick"),
    ("schedules.reap", "schedules.tasks.reap"),
]


def create(apps, schema_editor):
    QSchedule = apps.get_model("django_q", "Schedule")
    for name, func in PERIODIC:
        QSchedule.objects.get_or_create(
            name=name,
            defaults={"func": func, "schedule_type": "I", "minutes": 1, "repeats": -1},
        )


def remove(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name__in=[name for name, _ in PERIODIC]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("schedules", "0001_initial"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create, remove)]
