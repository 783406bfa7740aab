"""Development tooling, not part of the deployed product: the local stack supervisor (scripts/run),
the network-namespace test bed (scripts/testbed), and the helpers tests and benchmarks share."""
