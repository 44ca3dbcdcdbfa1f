"""`python -m gpuyard` is the CLI."""

from gpuyard.cli.main import main

main()
