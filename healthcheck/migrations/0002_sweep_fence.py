"""The sweep's fencing token (healthcheck.models.SweepFence, healthcheck.fence)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('healthcheck', '0001_node_fillfactor'),
    ]

    operations = [
        migrations.CreateModel(
            name='SweepFence',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('token', models.BigIntegerField(default=0)),
            ],
            options={
                'verbose_name': 'sweep fence',
            },
        ),
    ]
