"""`python -m agents.probe SPEC.json`: one rank of one probe in a fresh interpreter (a cold start)."""

from agents.probe.ladder import main

main()
