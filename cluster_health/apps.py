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
        from cluster_health.web.consumers import connect_signals

        connect_signals()  # a page's socket closes when its login ends (logout, expiry, user deactivated)
        register_after_sweep()
        from cluster_health import nodes
        from cluster_health.shapes.topology_report import inferred_groups

        nodes.MEASURED_GROUPS[:] = [inferred_groups]  # groups_of: the measured groups where none is declared


def register_after_sweep() -> None:
    """What a finished sweep changes beside its alerts (cluster_health/actions/tasks.py, AFTER_SWEEP), in order:
    pair coverage first, then the operators' states (a return to service concluded), then an idle hold released."""
    from cluster_health import coverage, operator_states
    from cluster_health.actions import tasks
    from cluster_health.sweeps.idle import release_hold

    def record_coverage(sweep) -> list[str]:
        coverage.record(sweep)
        return []

    tasks.AFTER_SWEEP[:] = [record_coverage, operator_states.after_sweep, release_hold]
    tasks.AFTER_ENDED[:] = [release_hold]
