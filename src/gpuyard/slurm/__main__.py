"""``python -m gpuyard.slurm COMMAND ...``: what ``gpuyard slurm-shims`` scripts run.

``sbatch`` tries its quick path first (``gpuyard.slurm.quick``: no client, no models to load);
everything else, and whatever the quick path leaves, runs the full command.
"""

import sys

if len(sys.argv) > 1 and sys.argv[1] == "sbatch":
    from gpuyard.slurm.quick import sbatch

    status = sbatch(sys.argv[2:], sys.stdout)
    if status is not None:
        sys.stdout.flush()
        sys.exit(status)

from gpuyard.slurm.commands import main

sys.exit(main())
