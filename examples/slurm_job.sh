#!/bin/bash
# A Slurm batch script as Slurm users write them, unchanged: `sbatch examples/slurm_job.sh`
# through gpuyard's Slurm commands (docs/slurm.md). Its output lands in slurm-<id>.out here.
#SBATCH --job-name=linreg
#SBATCH --nodes=1
#SBATCH --gpus-per-node=1
#SBATCH --time=00:10:00
srun python examples/train_single.py
