"""What a hung job's ranks show on this node: which processes are its ranks, what state each is in,
where each thread is (its Python stack), and the TCP connections each holds to the other ranks.

Collection never needs the job's cooperation: the ranks are found by their launch variables
(``MASTER_ADDR``/``MASTER_PORT`` or ``SLURM_JOB_ID``) in /proc, their stacks read with py-spy
(it reads a stopped process too), their sockets from the kernel (``ss -ti``). Only the
launch variables on an allow-list leave the node, never the rest of a process's environment,
and every list is bounded. ``python -m agents.hangs.inspect`` runs it as one small process
with a narrow interface: a job selector in, bounded JSON out (it needs ptrace rights over the
job's processes: root, or CAP_SYS_PTRACE; the agent itself keeps none).
"""
