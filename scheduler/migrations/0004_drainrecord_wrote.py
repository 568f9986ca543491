"""DrainRecord.wrote: the reason MAC last wrote into Slurm, kept apart from the decision.

Existing rows whose last decision wrote into Slurm start with that reason."""

from django.db import migrations, models
from django.db.models import F

WROTE = ("drain", "reason", "reboot")


def keep_what_was_written(apps, schema_editor):
    DrainRecord = apps.get_model("scheduler", "DrainRecord")
    DrainRecord.objects.filter(decision__in=WROTE, dry_run=False).update(wrote=F("reason"))


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0003_job_slurm_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="drainrecord",
            name="wrote",
            field=models.CharField(blank=True, default="", max_length=500),
        ),
        migrations.RunPython(keep_what_was_written, migrations.RunPython.noop),
    ]
