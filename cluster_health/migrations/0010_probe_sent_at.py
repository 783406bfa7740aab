from django.db import migrations, models
from django.db.models import F


def running_probes_were_sent(apps, schema_editor):
    """Probes running at the upgrade were dispatched by a version that sent at once: not to be sent again."""
    for name in ("PairProbe", "GroupProbe"):
        apps.get_model("cluster_health", name).objects.filter(status="running").update(sent_at=F("started"))


class Migration(migrations.Migration):

    dependencies = [
        ('cluster_health', '0009_api_token_scope_expiry'),
    ]

    operations = [
        migrations.AddField(
            model_name='groupprobe',
            name='sent_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='pairprobe',
            name='sent_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(running_probes_were_sent, migrations.RunPython.noop),
    ]
