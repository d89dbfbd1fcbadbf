"""Online RL through the real `tunedeck up`: an SFT job, then a GRPO job started from its
weights by `model: job:ID`, on real torchrun CPU ranks with the Celery worker: the reward
climbs, every step's RL figures are stored and served, the job lists its lineage, and bad
GRPO specs are refused by field before anything is stored."""
from __future__ import annotations

import pytest

from harness.servers import running_tunedeck

pytestmark = [pytest.mark.torchrun]

SFT_JOB = {"name": "e2e-sft", "dataset": "builtin:arithmetic", "num_gpus": 2, "max_steps": 60,
           "learning_rate": 5e-3, "micro_batch_size": 4, "seq_len": 64}
REWARDS = [{"name": "contains", "text": "7"},
           {"name": "numeric_match", "tolerance": 10, "weight": 0.5}]
GRPO_JOB = {"name": "e2e-grpo", "objective": "grpo", "dataset": "builtin:arithmetic-rl",
            "num_gpus": 2, "max_steps": 30, "learning_rate": 3e-3, "lr_schedule": "constant",
            "micro_batch_size": 8, "seq_len": 48,
            "grpo": {"num_generations": 4, "max_completion_length": 8, "rewards": REWARDS}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_tunedeck(tmp_path_factory.mktemp("grpo-up")) as server:
        yield server


def refused(response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {".".join(map(str, item["loc"][1:])): item["msg"] for item in response.json()["detail"]}


@pytest.fixture(scope="module")
def chain(server):
    """(the SFT job's id, the GRPO job's id, the GRPO job's row): SFT, then GRPO from it."""
    sft = server.submit(SFT_JOB)
    assert server.wait_for(sft, {"succeeded", "failed", "cancelled"})["status"] == "succeeded"
    grpo = server.submit({**GRPO_JOB, "model": f"job:{sft}"})
    job = server.wait_for(grpo, {"succeeded", "failed", "cancelled"})
    assert job["status"] == "succeeded", job["error"]
    return sft, grpo, job


def test_sft_then_grpo_from_its_weights_raises_the_reward(server, chain):
    sft, grpo, job = chain
    assert [(item["id"], item["objective"]) for item in job["lineage"]] == [(sft, "sft"),
                                                                          (grpo, "grpo")]
    train = server.http.get(f"/api/jobs/{grpo}/metrics").json()["train"]
    assert [row["step"] for row in train] == list(range(1, 31))
    rewards = [row["reward"] for row in train]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    print(f"through tunedeck up: mean reward, first 10 steps {first:.3f}, last 10 {last:.3f}")
    assert last > first + 0.4, rewards
    assert set(train[-1]["reward_means"]) == {"contains", "numeric_match"}
    assert all(row["sampling_seconds"] > 0 and row["completion_length_max"] <= 8 for row in train)
    # The trainer was handed the SFT job's merged folder; the row keeps the reference.
    config = server.http.get(f"/api/jobs/{grpo}/config").json()
    assert config["trainer"]["objective"] == "grpo"
    assert config["trainer"]["grpo"]["num_generations"] == 4
    assert job["spec"]["model"] == f"job:{sft}"
    # The kept rollouts, newest first: a prompt with all 4 of its completions and rewards.
    rollouts = server.http.get(f"/api/jobs/{grpo}/rollouts").json()["rollouts"]
    assert [rollout["step"] for rollout in rollouts] == [30, 20, 10, 1]
    completions = rollouts[0]["samples"][0]["completions"]
    assert len(completions) == 4 and set(completions[0]["rewards"]) == {"contains",
                                                                       "numeric_match"}


def test_bad_grpo_specs_are_refused_by_field_before_anything_is_stored(server):
    before = len(server.http.get("/api/jobs").json())
    cases = [({"grpo": {**GRPO_JOB["grpo"], "rewards": [{"name": "bleu"}]}}, "grpo.rewards.0"),
             ({"grpo": {**GRPO_JOB["grpo"], "num_generations": 1}}, "grpo.num_generations"),
             ({"seq_len": 8}, ""),
             ({"model": "job:424242"}, "model")]
    for change, field in cases:
        problems = refused(server.http.post("/api/jobs", json={**GRPO_JOB, **change}))
        assert field in problems, problems
    missing_column = refused(server.http.post("/api/jobs", json={
        **GRPO_JOB, "dataset": "builtin:arithmetic"}))
    assert "no column 'answer', which grpo.rewards[1] (numeric_match) reads" in \
        missing_column["dataset"]
    assert len(server.http.get("/api/jobs").json()) == before


def test_try_it_answers_from_a_grpo_job_and_from_the_weights_it_started_from(server, chain):
    """The base of a job started from another job's weights is that job's merged model."""
    _sft, grpo, _job = chain
    for variant in ("merged", "base"):
        response = server.http.post(f"/api/jobs/{grpo}/generate", json={
            "messages": [{"role": "user", "content": "What is 12 + 7?"}],
            "max_new_tokens": 8, "temperature": 0.0, "variant": variant})
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "done", response.json()
