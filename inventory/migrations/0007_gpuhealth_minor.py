"""GpuHealth.minor: each GPU's device-file minor number, for job attribution's GPU order.

The sweep parses a node's verdict answer only when it changed, so a node whose answer
stays the same would never get its GPUs' minors: every node's fingerprint is cleared,
and the first sweep after the upgrade reads every answer once (as after a fleet reboot).
"""

from django.db import migrations, models


def read_every_answer_again(apps, schema_editor):
    Node = apps.get_model("inventory", "Node")
    Node.objects.exclude(health_digest="").update(health_digest="")


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0006_faults_forgotten_event"),
    ]

    operations = [
        migrations.AddField(
            model_name="gpuhealth",
            name="minor",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(read_every_answer_again, migrations.RunPython.noop),
    ]
