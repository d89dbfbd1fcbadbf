#!/bin/bash
# TuneDeck job 12: written by its Slurm executor.
#SBATCH --job-name=tunedeck-12
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=30
#SBATCH --output=/shared/tunedeck/runs/job-12/logs/slurm-%j.out
#SBATCH --open-mode=append
set -euo pipefail

export OMP_NUM_THREADS=8
export PYTHONUNBUFFERED=1
export TUNEDECK_HOME=/shared/tunedeck

srun --kill-on-bad-exit=1 /opt/tunedeck/.venv/bin/torchrun --standalone --nnodes 1 --nproc_per_node 2 --log-dir /shared/tunedeck/runs/job-12/logs/ranks --tee 3 -m trainer --run-dir /shared/tunedeck/runs/job-12
