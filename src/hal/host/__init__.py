"""What HAL reads and writes of the host it runs on: its wall clock (``clock``), a
process's identity in ``/proc`` (``process``), and a cgroup's memory limit and CPU fence
(``cgroup_memory``), shared by the node agent and ``srun``.

Imports nothing of hal but ``hal.core``: the layers above it (agents, compat, the server)
get the host from here, so ``hal.core`` stays free of I/O and clock reads.
"""
