"""The sbatch script of a job: golden files for 1, 2 and 4 nodes, the site's options
validated, and the script's per-node launch run by a real bash with srun and scontrol
stand-ins that start one task a node, as Slurm does.

Set UPDATE_GOLDEN=1 to rewrite the golden files after an intended change, then review the diff.
"""
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder
from tunedeck.slurm.sbatch_script import SbatchJob, SlurmOptions, sbatch_script

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
TORCHRUN = "/opt/tunedeck/.venv/bin/torchrun"
ENVIRONMENT = {"OMP_NUM_THREADS": "8", "PYTHONUNBUFFERED": "1",
               "TUNEDECK_HOME": "/shared/tunedeck"}
GPU_SITE = SlurmOptions(partition="gpu", account="ml-team", qos="normal", time_limit="2-00:00:00",
                        extra_args=("--exclusive", "--constraint=h100"), cpus_per_task=32)

CASES = {
    "sbatch_1x8_zero2": (JobSpec(max_steps=30, num_gpus=8), GPU_SITE, False),
    "sbatch_2x8_fsdp_resume": (JobSpec(max_steps=30, num_gpus=8, num_nodes=2, backend="fsdp"),
                               GPU_SITE, True),
    "sbatch_4x4_zero2": (JobSpec(max_steps=30, num_gpus=4, num_nodes=4),
                         SlurmOptions(partition="gpu"), False),
    "sbatch_cpu_2_ranks": (JobSpec(max_steps=30, num_gpus=2, backend="fsdp"),
                           SlurmOptions(gpus=False, time_limit="30"), False),
}


def script_of(name: str, run_dir: str = "/shared/tunedeck/runs/job-12") -> str:
    spec, options, resume = CASES[name]
    return sbatch_script(SbatchJob(job_id=12, spec=spec, run=RunFolder(Path(run_dir)),
                                   torchrun=TORCHRUN, resume=resume, environment=ENVIRONMENT),
                         options)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_script_matches_its_golden_file(name):
    path = GOLDEN / f"{name}.sh"
    actual = script_of(name)
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(actual)
    assert actual == path.read_text()


def test_resources_come_from_the_spec_and_the_site():
    script = script_of("sbatch_2x8_fsdp_resume")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --cpus-per-task=32", "#SBATCH --partition=gpu",
                 "#SBATCH --account=ml-team", "#SBATCH --qos=normal",
                 "#SBATCH --time=2-00:00:00", "#SBATCH --exclusive",
                 "#SBATCH --constraint=h100",
                 "#SBATCH --output=/shared/tunedeck/runs/job-12/logs/slurm-%j.out"):
        assert line in script.splitlines()
    assert "--resume" in script
    # A CPU partition: no GPU request, a core a rank.
    cpu = script_of("sbatch_cpu_2_ranks")
    assert "--gpus-per-node" not in cpu and "#SBATCH --cpus-per-task=2" in cpu
    assert "--standalone" in cpu


@pytest.mark.parametrize("options, field", [
    (dict(partition="gpu; rm -rf /"), "TUNEDECK_SLURM_PARTITION"),
    (dict(account="a b"), "TUNEDECK_SLURM_ACCOUNT"),
    (dict(qos="$(id)"), "TUNEDECK_SLURM_QOS"),
    (dict(time_limit="forever"), "TUNEDECK_SLURM_TIME_LIMIT"),
    (dict(extra_args=("--mail-user=a@b.c\n#SBATCH --uid=0",)), "TUNEDECK_SLURM_EXTRA_ARGS"),
    (dict(extra_args=("--comment=`id`",)), "TUNEDECK_SLURM_EXTRA_ARGS"),
    (dict(cpus_per_task=0), "TUNEDECK_SLURM_CPUS_PER_TASK"),
])
def test_a_bad_site_option_is_refused_naming_its_setting(options, field):
    with pytest.raises(ValueError, match=field):
        SlurmOptions(**options)


def test_a_run_folder_that_cannot_be_written_in_a_script_is_refused():
    with pytest.raises(ValueError, match="run folder"):
        script_of("sbatch_1x8_zero2", run_dir="/shared/my runs/job-12")


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("nodes", [2, 4])
def test_each_node_gets_its_own_rank_and_the_first_nodes_endpoint(tmp_path, nodes):
    """bash runs the script; `srun` starts its command once a node with that node's
    SLURM_NODEID, as Slurm does; `torchrun` prints the argv it was given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "scontrol", '#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && '
                'printf "gpu-%s\\n" $(seq 1 ' + str(nodes) + ')\n')
    _executable(bin_dir / "srun", '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\n'
                'for node in $(seq 0 ' + str(nodes - 1) + '); do SLURM_NODEID=$node "$@"; done\n')
    torchrun = bin_dir / "torchrun"
    _executable(torchrun, '#!/bin/bash\necho "$@"\n')
    spec = JobSpec(max_steps=30, num_gpus=4, num_nodes=nodes)
    run = RunFolder(tmp_path / "job-3")
    script = sbatch_script(SbatchJob(job_id=3, spec=spec, run=run, torchrun=str(torchrun)),
                           SlurmOptions(partition="gpu"))
    script_file = tmp_path / "job.sbatch"
    script_file.write_text(script)
    result = subprocess.run(["bash", str(script_file)], capture_output=True, text=True,
                            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                                 "SLURM_JOB_NODELIST": f"gpu-[1-{nodes}]",
                                 "SLURM_JOB_ID": "41234"}, check=True)
    lines = result.stdout.splitlines()
    assert len(lines) == nodes
    for node_rank, line in enumerate(lines):
        words = line.split()
        assert words[words.index("--node-rank") + 1] == str(node_rank)
        # The first node by name (this scontrol knows no NodeAddr), the job's own port.
        assert words[words.index("--rdzv-endpoint") + 1] == "gpu-1:29734"
        assert words[words.index("--nnodes") + 1] == str(nodes)
        assert words[words.index("--nproc_per_node") + 1] == "4"
        assert words[words.index("--rdzv-backend") + 1] == "static"
        assert words[-2:] == ["--run-dir", str(run.path)]
