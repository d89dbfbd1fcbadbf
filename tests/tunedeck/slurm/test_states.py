"""What squeue's and sacct's lines mean for a job's row (the lines as Slurm 22.05 prints
them with the executor's formats)."""
import pytest

from tunedeck.jobs.failure_kinds import NODE_FAIL, OUT_OF_MEMORY, TIMEOUT
from tunedeck.slurm.states import (SlurmState, parse_sacct, parse_squeue, pending_words,
                                   sacct_argv, squeue_argv, verdict)


def test_one_call_asks_for_every_job():
    assert squeue_argv(["4", "9"])[-2:] == ["-j", "4,9"]
    assert sacct_argv(["4", "9"])[-2:] == ["-j", "4,9"]
    assert "-X" in sacct_argv(["4"])  # the allocation, not its steps


def test_squeue_lines_parse_with_their_reasons():
    states = parse_squeue("12|PENDING|Resources|\n13|RUNNING|None|gpu-[1-2]\n"
                          "14|PENDING|QOSMaxJobsPerUserLimit|\n")
    assert states["12"] == SlurmState("12", "PENDING", "Resources")
    assert states["13"].reason is None and states["13"].nodes == "gpu-[1-2]"
    assert states["14"].reason == "QOSMaxJobsPerUserLimit"


def test_sacct_lines_keep_the_allocation_and_its_exit_code():
    text = ("20|COMPLETED|None|vm|0:0\n20.batch|COMPLETED||vm|0:0\n"
            "21|CANCELLED by 0|None|vm|0:15\n22|TIMEOUT|None|vm|0:0\n"
            "23|FAILED|NonZeroExitCode|vm|1:0\n24|CANCELLED by 0|None|None assigned|0:0\n")
    states = parse_sacct(text)
    assert set(states) == {"20", "21", "22", "23", "24"}
    assert states["20"].nodes == "vm" and states["24"].nodes is None
    assert states["21"].state == "CANCELLED"
    assert states["23"].exit_code == "1:0"


@pytest.mark.parametrize("state, phase, kind", [
    ("PENDING", "queued", None), ("RUNNING", "running", None), ("COMPLETING", "running", None),
    ("COMPLETED", "ended", None), ("FAILED", "ended", None), ("CANCELLED", "cancelled", None),
    ("TIMEOUT", "failed", TIMEOUT), ("OUT_OF_MEMORY", "failed", OUT_OF_MEMORY),
    ("NODE_FAIL", "failed", NODE_FAIL), ("PREEMPTED", "requeued", None),
    ("REQUEUED", "requeued", None),
])
def test_each_state_has_its_phase(state, phase, kind):
    judged = verdict(SlurmState("1", state))
    assert (judged.phase, judged.failure_kind) == (phase, kind)


def test_pending_reasons_in_words():
    assert pending_words("Resources", "gpu") == "waiting for resources on partition gpu"
    assert pending_words("QOSMaxGRESPerUser", "gpu") == "QOS limit (QOSMaxGRESPerUser)"
    assert pending_words("AssocGrpGRES") == "account limit (AssocGrpGRES)"
    assert "NewReason" in pending_words("NewReason")
    assert verdict(SlurmState("1", "PENDING", "Priority"), "gpu").words == \
        "waiting behind higher-priority jobs on partition gpu"


def test_a_failure_keeps_slurms_words():
    assert "TIMEOUT" in verdict(SlurmState("1", "TIMEOUT")).words
    assert verdict(SlurmState("1", "FAILED", exit_code="1:0")).words == "Slurm: FAILED, exit code 1:0"
