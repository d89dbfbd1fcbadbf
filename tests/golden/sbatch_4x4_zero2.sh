#!/bin/bash
# TuneDeck job 12: written by its Slurm executor.
#SBATCH --job-name=tunedeck-12
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --partition=gpu
#SBATCH --output=/shared/tunedeck/runs/job-12/logs/slurm-%j.out
#SBATCH --open-mode=append
set -euo pipefail

export OMP_NUM_THREADS=8
export PYTHONUNBUFFERED=1
export TUNEDECK_HOME=/shared/tunedeck

# torchrun's static rendezvous: the store on the first node, ranks in node order.
first_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export TUNEDECK_RDZV_ENDPOINT="$first_node:29500"
# One task a node; each expands its own $SLURM_NODEID.
srun --kill-on-bad-exit=1 bash -c 'exec "$0" --node-rank "$SLURM_NODEID" --rdzv-endpoint "$TUNEDECK_RDZV_ENDPOINT" "$@"' /opt/tunedeck/.venv/bin/torchrun --nnodes 4 --rdzv-backend static --rdzv-id tunedeck-job-12 --rdzv-conf timeout=300 --nproc_per_node 4 --log-dir /shared/tunedeck/runs/job-12/logs/ranks --tee 3 -m trainer --run-dir /shared/tunedeck/runs/job-12
