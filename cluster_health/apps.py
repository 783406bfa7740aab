from django.apps import AppConfig
from django.db.models.signals import post_migrate


class ClusterHealthConfig(AppConfig):
    name = "cluster_health"
    verbose_name = "Cluster health"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from cluster_health import defaults

        # Runs after auth's own handler has created the start_sweep permission.
        post_migrate.connect(defaults.on_post_migrate, sender=self, dispatch_uid="cluster_health.defaults")
