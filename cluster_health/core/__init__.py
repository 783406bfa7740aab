"""Pure domain logic: planning, merging halves, verdicts and findings, matrices. No Django, no I/O."""
