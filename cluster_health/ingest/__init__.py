"""What agents send, applied: heartbeats, pair halves (batched), group halves; the rest rejected and kept."""

from cluster_health.ingest.buffer import buffer_result, drain_all
from cluster_health.ingest.consumer import reclaim_orphans
from cluster_health.ingest.heartbeats import record_heartbeat
from cluster_health.ingest.results import ingest_result, ingest_results

__all__ = ["buffer_result", "drain_all", "ingest_result", "ingest_results", "reclaim_orphans", "record_heartbeat"]
