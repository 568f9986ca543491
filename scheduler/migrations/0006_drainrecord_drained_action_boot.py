"""DrainRecord.drained_action and drained_boot: what MAC's drain of a node waits for.

Existing rows start with both unknown (""). The drain treats an unknown action as an
operator's repair (every unhealthy verdict MAC drains for asks for one), and the first
pass that finds such a drain of MAC's in effect takes the node's boot then as the
drain's: the node resumes after its next boot, or when a person resumes it
(docs/slurm.md, "Resuming after a repair")."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0005_jobgpu_slurm_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="drainrecord",
            name="drained_action",
            field=models.CharField(
                blank=True,
                choices=[
                    ("none", "none"),
                    ("restart_app", "restart_app"),
                    ("reset_gpu", "reset_gpu"),
                    ("reboot", "reboot"),
                    ("inspect_hardware", "inspect_hardware"),
                ],
                default="",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="drainrecord",
            name="drained_boot",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
    ]
