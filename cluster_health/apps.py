import sys

from cluster_health import defaults


class ClusterHealthConfig(defaults.ProjectAppConfig):
    name = "cluster_health"
    verbose_name = "Cluster health"

    def ready(self):
        super().ready()
        from django.conf import settings

        if settings.SECRET_KEY == settings.DEVELOPMENT_SECRET_KEY:
            # Every process (web, workers, beat, manage.py) says it loudly, on stderr whatever the logging.
            sys.stderr.write(
                "WARNING: SECRET_KEY is the public development key: anyone can forge sessions and unseal "
                "agent keys. Set SECRET_KEY (50+ random characters) on anything reachable by others.\n"
            )
        from django.contrib.auth.signals import user_logged_out

        from cluster_health.web.consumers import close_sessions_sockets

        user_logged_out.connect(close_sessions_sockets, dispatch_uid="cluster_health.close_sessions_sockets")
