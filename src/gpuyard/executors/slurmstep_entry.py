"""What a Slurm batch job's commands run: ``python -I -S slurmstep_entry.py COMMAND ...``.

Python compiles the script it runs at every start and caches only imported modules: run
itself, ``slurmstep.py`` costs about 8 ms of compiling before the batch script starts (and
again at every ``srun`` and ``scontrol``). This file stays a few lines and imports it, from its
bytecode cache (written when the executor loads it, or by the install). With ``-I -S`` our
package is not on the path; its root is added at the end, so that nothing in it can shadow the
standard library (slurmstep.py itself imports nothing of gpuyard).
"""

import os
import sys

if __name__ == "__main__":  # never on import: that would run a command
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from gpuyard.executors.slurmstep import main

    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
