"""What applying one agent message did (the tasks return it; tests and benchmarks count it)."""

APPLIED = "applied"  # stored; the probe waits for more halves
FINAL = "final"  # stored, and it closed the probe
DUPLICATE = "duplicate"  # that half was already stored: nothing changed
LATE = "late"  # the probe was already closed (deadline, cancel): nothing changed
REJECTED = "rejected"  # not applied; kept as a RejectedMessage with the reason
