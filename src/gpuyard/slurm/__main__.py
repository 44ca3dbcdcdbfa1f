"""``python -m gpuyard.slurm COMMAND ...``: what ``gpuyard slurm-shims`` scripts run.

``sbatch`` tries its quick path first (``gpuyard.slurm.quick``: no client, no models to load);
everything else, and whatever the quick path leaves, runs the full command. The shims start
Python with ``-I -S`` (no ``site``: its ``.pth`` files cost more than the quick path's own
imports) and the package's directories on ``sys.path``; the full command first runs ``site``,
so that it finds what it always found.
"""

import sys


def run(argv: list[str]) -> int:
    """Run ``COMMAND ARGS`` (``argv``, without the program's name); the exit status."""
    if argv[:1] == ["sbatch"]:
        from gpuyard.slurm.quick import sbatch

        status = sbatch(argv[1:], sys.stdout)
        if status is not None:
            sys.stdout.flush()
            return status
    if sys.flags.no_site:  # started by a shim: the full command needs what site adds
        import site

        site.main()
    from gpuyard.slurm.commands import main

    return main(argv)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
