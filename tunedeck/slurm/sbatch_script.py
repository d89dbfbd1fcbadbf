"""The sbatch script of a job: Slurm's resource lines, the environment the ranks get, and one
`srun` that starts the job's torchrun once per node, with the argv the local executor
builds (tunedeck.launch_config.build_torchrun_argv).

Nothing a user typed reaches the script: the spec gives only numbers (nodes, ranks per
node), the site's options are validated words, and every argv word is shell-quoted.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tunedeck.launch_config import build_torchrun_argv
from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder

SCRIPT_NAME = "job.sbatch"
# torchrun's static rendezvous store, on the job's first node: a port of
# RENDEZVOUS_PORT .. RENDEZVOUS_PORT + RENDEZVOUS_PORTS - 1, by the Slurm job id.
RENDEZVOUS_PORT = 29500
RENDEZVOUS_PORTS = 1000
# The per-node parts of the argv: srun's task on each node fills them in, since the batch
# script itself runs on the first node only (where $SLURM_NODEID is 0).
NODE_RANK_WORD = '"$SLURM_NODEID"'
ENDPOINT_WORD = '"$TUNEDECK_RDZV_ENDPOINT"'

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (sbatch(1) --time).
_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}(:\d{1,2}){0,2})$")
# An extra sbatch option: one `--name` or `--name=value` word, no shell or #SBATCH syntax.
_OPTION = re.compile(r"^--[a-z][a-z0-9-]*(=[A-Za-z0-9_.,:=/@%+-]+)?$")
_PATH = re.compile(r"^/[A-Za-z0-9_.,:=/@%+-]+$")


@dataclass(frozen=True)
class SlurmOptions:
    """What the site's settings say about every job (TUNEDECK_SLURM_*), and what the
    partition has: GPUs (`--gpus-per-node`) or only CPUs (a rank a core, as on a CPU host)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None
    extra_args: tuple[str, ...] = ()
    cpus_per_task: int | None = None
    gpus: bool = True
    rendezvous_port: int = RENDEZVOUS_PORT

    def __post_init__(self) -> None:
        for name in ("partition", "account", "qos"):
            value = getattr(self, name)
            if value is not None and not _NAME.match(value):
                raise ValueError(f"TUNEDECK_SLURM_{name.upper()}={value!r}: letters, digits, "
                                 "'_', '.' and '-' only")
        if self.time_limit is not None and not _TIME.match(self.time_limit):
            raise ValueError(f"TUNEDECK_SLURM_TIME_LIMIT={self.time_limit!r}: one of Slurm's "
                             "formats, e.g. 90, 4:00:00 or 2-00:00:00")
        for option in self.extra_args:
            if not _OPTION.match(option):
                raise ValueError(f"TUNEDECK_SLURM_EXTRA_ARGS: {option!r} is not one "
                                 "--option or --option=value word")
        if self.cpus_per_task is not None and self.cpus_per_task < 1:
            raise ValueError("TUNEDECK_SLURM_CPUS_PER_TASK: at least 1")


@dataclass(frozen=True)
class SbatchJob:
    """One job's submission: its id, spec and run folder on the shared filesystem, the
    torchrun of a Python environment the nodes see at the same path, and the environment
    the ranks get (tunedeck-chosen values, never secrets: it is written in the script)."""

    job_id: int
    spec: JobSpec
    run: RunFolder
    torchrun: str
    resume: bool = False
    environment: dict[str, str] = field(default_factory=dict)


def sbatch_script(job: SbatchJob, options: SlurmOptions) -> str:
    """The script `sbatch --parsable` is given for `job`."""
    run_dir = str(job.run.path)
    for name, path in (("run folder", run_dir), ("torchrun", job.torchrun)):
        if not _PATH.match(path):
            raise ValueError(f"the {name} {path!r} cannot be written in an sbatch script: an "
                             "absolute path without spaces or shell characters is needed")
    spec = job.spec
    lines = ["#!/bin/bash", f"# TuneDeck job {job.job_id}: written by its Slurm executor."]
    lines += [f"#SBATCH {option}" for option in _resource_options(job, options)]
    lines += ["set -euo pipefail", ""]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in
              sorted(job.environment.items())]
    argv = build_torchrun_argv(spec, run_dir, torchrun=job.torchrun, resume=job.resume,
                               node_rank=0, rendezvous="-", job_id=job.job_id)
    resume = ""
    if not job.resume:
        # Slurm runs a requeued job's script again (a preemption, `scontrol requeue`): the
        # run then continues from its latest checkpoint, as TuneDeck's resume does.
        lines += ["", "resume=()",
                  'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then resume=(--resume); fi']
        resume = ' "${resume[@]}"'
    if spec.num_nodes == 1:
        lines += ["", "srun --kill-on-bad-exit=1 " + shlex.join(argv) + resume]
        return "\n".join(lines) + "\n"
    per_node = _without_options(argv, ("--node-rank", "--rdzv-endpoint"))
    lines += [
        "",
        "# torchrun's static rendezvous: the store on the first node (at the address Slurm",
        "# itself reaches it by), ranks in node order; a port of the job's own, so jobs",
        "# sharing a node do not meet. (sed, not head: no SIGPIPE under pipefail.)",
        'first_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
        'first_address=$(scontrol show node "$first_node" | sed -n "s/.*NodeAddr=\\([^ ]*\\).*/\\1/p" '
        '|| true)',
        f'export TUNEDECK_RDZV_ENDPOINT="${{first_address:-$first_node}}:'
        f'$(({options.rendezvous_port} + SLURM_JOB_ID % {RENDEZVOUS_PORTS}))"',
        "# One task a node; each expands its own $SLURM_NODEID. --label: each line of the",
        "# output says its node (every node's ranks print as [default0]...).",
        "srun --kill-on-bad-exit=1 --label bash -c "
        + shlex.quote(f'exec "$0" --node-rank {NODE_RANK_WORD} '
                      f'--rdzv-endpoint {ENDPOINT_WORD} "$@"')
        + " " + shlex.join(per_node) + resume,
    ]
    return "\n".join(lines) + "\n"


def _resource_options(job: SbatchJob, options: SlurmOptions) -> list[str]:
    spec = job.spec
    resources = [f"--job-name=tunedeck-{job.job_id}", f"--nodes={spec.num_nodes}",
                 "--ntasks-per-node=1"]
    if options.gpus:
        resources.append(f"--gpus-per-node={spec.num_gpus}")
    # Without GPUs each rank is a CPU process: a core each at least.
    cpus = options.cpus_per_task or (None if options.gpus else spec.num_gpus)
    if cpus is not None:
        resources.append(f"--cpus-per-task={cpus}")
    resources += [f"--{name.replace('_', '-')}={value}" for name, value in (
        ("partition", options.partition), ("account", options.account), ("qos", options.qos),
        ("time", options.time_limit)) if value is not None]
    resources.append(f"--output={job.run.logs_dir}/slurm-%j.out")
    # The executor follows the job from its files and from Slurm: no mail, no requeue by
    # Slurm's own choice except a preemption, which the executor resumes.
    resources.append("--open-mode=append")
    resources += list(options.extra_args)
    return resources


def _without_options(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """`argv` less each of `names` and the value after it."""
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in names:
            skip = True
        else:
            kept.append(word)
    return kept


def rank_threads(spec: JobSpec, options: SlurmOptions) -> int:
    """OMP_NUM_THREADS of a rank: its share of the cores Slurm gives the node's task (the
    node's, not the login node's)."""
    cpus = options.cpus_per_task or (None if options.gpus else spec.num_gpus)
    return max(1, (cpus or spec.num_gpus) // spec.num_gpus)


def published_site(options: SlurmOptions, *, torchrun: str, runs_dir: str,
                   environment: dict[str, str]) -> dict:
    """What a Slurm executor's heartbeat says of how it writes scripts: enough for the web
    to show a job's script before it is submitted (`preview_script`)."""
    return {"options": {**asdict(options), "extra_args": list(options.extra_args)},
            "torchrun": torchrun, "runs_dir": runs_dir, "environment": environment}


PREVIEW_ID = "<id>"


def preview_script(spec: JobSpec, site: dict) -> str:
    """The script the executor that published `site` would submit for `spec`, with the job's
    id, not known before submit, as <id>."""
    options = SlurmOptions(**{**site["options"], "extra_args": tuple(site["options"]["extra_args"])})
    environment = {**site["environment"], "OMP_NUM_THREADS": str(rank_threads(spec, options))}
    run = RunFolder(Path(site["runs_dir"]) / "job-0")
    script = sbatch_script(SbatchJob(job_id=0, spec=spec, run=run, torchrun=site["torchrun"],
                                     environment=environment), options)
    for placeholder in ("job-0", "tunedeck-0", "job 0:"):
        script = script.replace(placeholder, placeholder.replace("0", PREVIEW_ID))
    return script
