"""The programs that run inside a job's workers, on a node, beside the job's own command.

``rexec.py`` (the remote-exec agent: ``serve`` on the target workers of MPI and Slurm jobs,
``agent`` for mpirun) and ``nodecheck.py`` (the node check before a job's command) are started
by their files with the pool's interpreter in isolated mode (``python -I -S``, the node check
``python -I``), so the job's Python environment cannot shadow them. ``channel.py`` is the
remote-exec wire protocol that ``rexec.py`` and the Slurm step's ``srun``
(:mod:`gpuyard.slurm.step`) both speak.

They run on the standard library only and import nothing of the control plane (an
import-linter contract holds them to that); this package's ``__init__`` imports nothing. The
other in-job code: the Slurm step (:mod:`gpuyard.slurm.step`) and the library a training
script imports (:mod:`gpuyard.runtime`). docs/architecture.md, "Programs that run inside a job".
"""
