"""What a Slurm batch job's commands run: ``python -I -S entry.py COMMAND ...``.

Python compiles the script it runs at every start and caches only imported modules: run
itself, ``main.py`` costs about 8 ms of compiling before the batch script starts (and
again at every ``srun`` and ``scontrol``). This file stays a few lines and imports it, from its
bytecode cache (written when the executor loads it, or by the install). With ``-I -S`` our
package is not on the path; its root is added at the end, so that nothing in it can shadow the
standard library (main.py imports nothing of gpuyard but the stdlib-only
:mod:`gpuyard.hostlist` and :mod:`gpuyard.injob.channel`).
"""

import os
import sys

if __name__ == "__main__":  # never on import: that would run a command
    root = os.path.abspath(__file__)
    for _ in range(4):  # src/gpuyard/slurm/step/entry.py -> src
        root = os.path.dirname(root)
    sys.path.append(root)
    from gpuyard.slurm.step.main import main

    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
