"""Running jobs on a Slurm cluster: the sbatch script of a job (a pure function of its spec
and the site's options) and what Slurm's states and reasons mean for a job's row."""
