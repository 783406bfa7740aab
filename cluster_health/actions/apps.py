from django.apps import AppConfig
from django.db.models.signals import post_migrate


class ActionsConfig(AppConfig):
    name = "cluster_health.actions"
    label = "actions"
    verbose_name = "Actions: alerts and Slurm"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from cluster_health.actions import bootstrap

        post_migrate.connect(bootstrap.on_post_migrate, sender=self, dispatch_uid="cluster_health.actions.bootstrap")
