"""Slurm-compatible commands over a gpuyard pool (docs/slurm.md)."""
