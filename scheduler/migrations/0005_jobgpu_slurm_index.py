"""JobGpu.slurm_index: Slurm's own GRES index, kept beside `index`, which is now the GPU as
the exporters number it (NVML's index; scheduler.jobread maps one to the other).

Rows written before were Slurm's index taken as the exporters': both are that index.
One row per job, node and Slurm index, as the read keys them."""

from django.db import migrations, models
from django.db.models import F


def slurms_index_was_the_index(apps, schema_editor):
    JobGpu = apps.get_model("scheduler", "JobGpu")
    JobGpu.objects.update(slurm_index=F("index"))


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0007_gpuhealth_minor"),
        ("scheduler", "0004_drainrecord_wrote"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="jobgpu",
            name="one_row_per_job_gpu",
        ),
        migrations.AddField(
            model_name="jobgpu",
            name="slurm_index",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(slurms_index_was_the_index, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="jobgpu",
            constraint=models.UniqueConstraint(
                fields=("job", "slurm_node", "slurm_index"), name="one_row_per_job_slurm_gpu"
            ),
        ),
    ]
