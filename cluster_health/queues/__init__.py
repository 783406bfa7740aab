"""What waits in Redis for the server or an agent: the keys and stored messages of the ingest
queue, buffer and consumers, the reader of that backlog, and the one sender of commands.

Both the write path's packages (``ingest``, ``sweeps``) and ``actions`` build on this one;
it imports none of them.
"""
