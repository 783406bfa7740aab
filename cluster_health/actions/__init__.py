"""Actions on a sweep's outcome: alerts to the ops team's channels and Slurm drains and resumes.

Runs after a sweep finishes, in Celery tasks on queue "server" sent after the commit,
so acting never delays or breaks closing the sweep.
"""
