#!/bin/bash
# TuneDeck job 12: written by its Slurm executor.
#SBATCH --job-name=tunedeck-12
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --partition=gpu
#SBATCH --account=ml-team
#SBATCH --qos=normal
#SBATCH --time=2-00:00:00
#SBATCH --output=/shared/tunedeck/runs/job-12/logs/slurm-%j.out
#SBATCH --open-mode=append
#SBATCH --exclusive
#SBATCH --constraint=h100
set -euo pipefail

export OMP_NUM_THREADS=8
export PYTHONUNBUFFERED=1
export TUNEDECK_HOME=/shared/tunedeck

srun --kill-on-bad-exit=1 /opt/tunedeck/.venv/bin/torchrun --standalone --nnodes 1 --nproc_per_node 8 --log-dir /shared/tunedeck/runs/job-12/logs/ranks --tee 3 -m trainer --run-dir /shared/tunedeck/runs/job-12
