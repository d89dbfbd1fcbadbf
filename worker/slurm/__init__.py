"""The Slurm executor: a worker on a login node that submits each job of its queues with
sbatch and follows it (state from squeue and sacct, metrics from the shared run folder)."""
