"""Every wait the tests make, named, with what it waits for.

These are upper bounds, not expected durations: a wait ends as soon as its condition
holds, so a bound costs nothing on a fast machine. Each is several times what the
thing takes on an idle 2-core CI machine, so a loaded machine does not fail a test;
none is tuned to one machine's speed. A test that needs a product setting waits on
that setting (for example the online window), never on a number copied from it.
"""

POLL_S = 0.1  # re-check interval for a cheap condition (a row, a file, a process state)
SLOW_POLL_S = 1.0  # re-check interval when each check starts a process of its own
PROCESS_EXIT_S = 10  # a process we signalled runs its handlers and exits
TORCH_PROCESS_START_S = 60  # a new Python process imports torch and is ready (cold page cache, loaded CPU)
COMMAND_S = 60  # one manage.py command (Django and the database, no probes) finishes
AGENTS_ONLINE_S = 60  # started agents import, connect to the broker and are seen online
SWEEP_END_S = 180  # a sweep of a few nodes reaches its verdict, one failed pair's probe deadline included
BED_COMMAND_S = 90  # a test bed command (namespaces, bridge, the stack inside) finishes
BED_CLEANUP_S = 120  # the test bed's cleanup stops every process and removes every namespace
NOTHING_LEFT_S = 15  # after cleanup, the kernel has dropped the namespaces and the processes are reaped
FRAME_S = 3  # a WebSocket frame arrives after a group_send on the in-memory or private Redis layer
PAGE_CELL_MS = 20_000  # a heatmap cell in an open page changes after its result was ingested
PAGE_RECONNECT_MS = 60_000  # a page reconnects after the web server restarts (daphne start included)
SERVER_CALL_S = 60  # a call handed to the test's server-side thread returns
