"""What runs inside a Slurm batch job: the batch step, ``srun`` and ``scontrol`` (:mod:`.main`,
started by :mod:`.entry`). The standard library only, and nothing of the control plane (the
server, services, store, controller, client): the job's own processes run it (docs/slurm.md)."""
