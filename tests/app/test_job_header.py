"""The job page's first line says what ran: a DPO job names its loss and reference."""
from datetime import datetime, timezone

from app.ui.job_page.job_handlers import _what_ran
from tunedeck.db.models import Job
from tunedeck.spec.job_spec import JobSpec


def header(spec: JobSpec) -> str:
    return _what_ran(Job(owner="ada", created_at=datetime(2026, 12, 6, tzinfo=timezone.utc)), spec)


def test_a_dpo_job_says_its_loss_and_reference_and_an_sft_job_says_nothing_of_it():
    dpo = JobSpec(max_steps=1, objective="dpo", dataset="builtin:arithmetic-preference",
                  dpo={"beta": 0.25})
    assert "· DPO (sigmoid, beta 0.25, reference auto) · lora on zero2 ·" in header(dpo)
    simpo = dpo.model_copy(update={"dpo": dpo.dpo.model_copy(update={"loss": "simpo"})})
    assert "· DPO (simpo, beta 0.25) · lora" in header(simpo)
    assert "DPO" not in header(JobSpec(max_steps=1))
