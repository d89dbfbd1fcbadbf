#!/bin/bash
# TuneDeck job 12: written by its Slurm executor.
#SBATCH --job-name=tunedeck-12
#SBATCH --nodes=2
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

# torchrun's static rendezvous: the store on the first node (at the address Slurm
# itself reaches it by), ranks in node order; a port of the job's own, so jobs
# sharing a node do not meet. (sed, not head: no SIGPIPE under pipefail.)
first_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
first_address=$(scontrol show node "$first_node" | sed -n "s/.*NodeAddr=\([^ ]*\).*/\1/p" || true)
export TUNEDECK_RDZV_ENDPOINT="${first_address:-$first_node}:$((29500 + SLURM_JOB_ID % 1000))"
# One task a node; each expands its own $SLURM_NODEID. --label: each line of the
# output says its node (every node's ranks print as [default0]...).
srun --kill-on-bad-exit=1 --label bash -c 'exec "$0" --node-rank "$SLURM_NODEID" --rdzv-endpoint "$TUNEDECK_RDZV_ENDPOINT" "$@"' /opt/tunedeck/.venv/bin/torchrun --nnodes 2 --rdzv-backend static --rdzv-id tunedeck-job-12 --rdzv-conf timeout=300 --nproc_per_node 8 --log-dir /shared/tunedeck/runs/job-12/logs/ranks --tee 3 -m trainer --run-dir /shared/tunedeck/runs/job-12 --resume
