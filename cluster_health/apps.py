from cluster_health import defaults


class ClusterHealthConfig(defaults.ProjectAppConfig):
    name = "cluster_health"
    verbose_name = "Cluster health"
