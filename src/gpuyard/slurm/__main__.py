"""``python -m gpuyard.slurm COMMAND ...``: what ``gpuyard slurm-shims`` scripts run."""

import sys

from gpuyard.slurm.commands import main

sys.exit(main())
