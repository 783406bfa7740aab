"""The pair table, written leaner: a sweep updates each pair row three or four times (running, sent,
its halves, closed), and every update that cannot stay on its page writes every index again.

- ``sweep`` and ``node_a`` lose their own indexes: pair_sweep_round_status and pair_history lead
  with them and serve the same lookups (the cascades and the history pages included).
- PostgreSQL: pages are filled to 70%, so that the updates that change no indexed column (the
  mark that a round's commands went out, each half as it arrives) stay on their page as
  heap-only tuples and write no index. A 256-node sweep measured 5,000 such updates of 130,000
  before and 37,000 after.
"""

import django.db.models.deletion
from django.db import migrations, models

FILLFACTOR = 70


def pages_with_room(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE cluster_health_pairprobe SET (fillfactor = {FILLFACTOR})")


def pages_full(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE cluster_health_pairprobe RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("cluster_health", "0013_open_sweep_matrix_snapshot"),
    ]

    operations = [
        migrations.AlterField(
            model_name="pairprobe",
            name="node_a",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="cluster_health.node",
            ),
        ),
        migrations.AlterField(
            model_name="pairprobe",
            name="sweep",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="pairs",
                to="cluster_health.sweep",
            ),
        ),
        migrations.RunPython(pages_with_room, pages_full),
    ]
