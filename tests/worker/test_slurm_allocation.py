"""A Slurm job as the supervision sees it (worker/slurm/executor.py SlurmAllocation), from
the states Slurm reports: running, ended with an exit code, requeued, or forgotten."""
from tunedeck.slurm.states import SlurmState
from worker.slurm.allocation import SlurmAllocation


class ReportedStates:
    """What squeue/sacct answered, one state a poll (worker/slurm/client.py SlurmStates
    asks Slurm; these tests give its answers directly)."""

    def __init__(self, *states):
        self._states = list(states)

    def state(self, slurm_job_id):
        return self._states.pop(0) if len(self._states) > 1 else self._states[0]


def test_running_then_completed_is_exit_code_zero():
    allocation = SlurmAllocation("7", ReportedStates(SlurmState("7", "RUNNING"),
                                                     SlurmState("7", "COMPLETED")), lambda: False)
    assert allocation.launcher.poll() is None
    assert allocation.launcher.poll() == 0 and allocation.verdict.phase == "ended"
    assert allocation.known_pids() == []


def test_a_failed_job_keeps_its_exit_code_and_a_signal_is_negative():
    failed = SlurmAllocation("7", ReportedStates(SlurmState("7", "FAILED", exit_code="3:0")),
                             lambda: False)
    assert failed.poll() == 3
    killed = SlurmAllocation("8", ReportedStates(SlurmState("8", "FAILED", exit_code="0:9")),
                             lambda: False)
    assert killed.poll() == -9


def test_a_job_slurm_no_longer_knows_is_lost():
    allocation = SlurmAllocation("7", ReportedStates(None), lambda: False)
    assert allocation.poll() == -1 and allocation.lost


def test_a_requeued_job_ends_this_run_as_requeued():
    allocation = SlurmAllocation("7", ReportedStates(SlurmState("7", "PENDING", "BeginTime")),
                                 lambda: False)
    assert allocation.poll() is not None and allocation.requeued


def test_the_executor_stopping_detaches_without_asking_slurm():
    allocation = SlurmAllocation("7", ReportedStates(SlurmState("7", "RUNNING")), lambda: True)
    assert allocation.poll() == -1 and allocation.detached and not allocation.lost
