from cluster_health import defaults


class ClusterHealthConfig(defaults.ProjectAppConfig):
    name = "cluster_health"
    verbose_name = "Cluster health"

    def ready(self):
        super().ready()
        from django.contrib.auth.signals import user_logged_out

        from cluster_health.web.consumers import close_sessions_sockets

        user_logged_out.connect(close_sessions_sockets, dispatch_uid="cluster_health.close_sessions_sockets")
