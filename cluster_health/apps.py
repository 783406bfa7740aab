from django.apps import AppConfig


class ClusterHealthConfig(AppConfig):
    name = "cluster_health"
    verbose_name = "Cluster health"
    default_auto_field = "django.db.models.BigAutoField"
