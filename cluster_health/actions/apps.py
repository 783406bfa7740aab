from cluster_health import defaults


class ActionsConfig(defaults.ProjectAppConfig):
    name = "cluster_health.actions"
    label = "actions"
    verbose_name = "Actions: alerts and Slurm"
    defaults_module = "cluster_health.actions.bootstrap"
