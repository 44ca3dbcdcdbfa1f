"""What the executor runs: ``python -I -S supervisor_entry.py SUPERVISOR_DIR``.

Python compiles the script it runs at every start and caches only imported modules, so the
supervisor's code lives in :mod:`gpuyard.executors.local.supervisor` and this file stays a few
lines: about 6 ms less per launch than running the supervisor module itself. With ``-I -S``
our package is not on the path; its root is added (at the end, so that nothing in it can
shadow the standard library).
"""

import os
import sys

if __name__ == "__main__":  # never on import: that would start a supervisor
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    from gpuyard.executors.local.supervisor import main

    code = main()
    sys.stderr.flush()
    os._exit(code)  # at once: the executor waits for this exit before it reports the poke
