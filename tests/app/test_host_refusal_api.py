"""POST /api/jobs refuses what no registered worker can run: 422 naming the field."""
from tunedeck.cluster import workers as worker_registry
from tunedeck.db.models import utc_now


def register_cpu_worker(client):
    with client.app_state.database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name="cpu@box", host="box", queues=["default"], pid=11,
            concurrency=1, resources={"gpus": None, "cpu_count": 2}, started_at=utc_now())


SPEC = {"max_steps": 5, "backend": "zero2", "precision": "fp16"}


def test_fp16_zero2_is_accepted_while_no_worker_is_registered(client):
    assert client.post("/api/jobs", json=SPEC).status_code == 201


def test_fp16_zero2_on_a_cpu_only_cluster_is_a_422_naming_precision(client):
    register_cpu_worker(client)
    response = client.post("/api/jobs", json=SPEC)
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "precision"]
    assert "pick bf16 or fp32" in problem["msg"]
    assert client.post("/api/jobs", json={**SPEC, "precision": "bf16"}).status_code == 201


def test_the_form_marks_fp16_beside_precision_before_submit(database):
    from app.auth.principal import OPEN_PRINCIPAL
    from app.ui.new_job import form_handlers
    from tunedeck.settings import Settings

    form = {**form_handlers.default_form(), "backend": "zero2", "precision": "fp16"}
    before = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings(),
                                        database=database)
    assert before.field_errors == {}  # no worker registered: the job may wait for one
    with database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name="cpu@box", host="box", queues=["default"], pid=11,
            concurrency=1, resources={"gpus": None}, started_at=utc_now())
    shown = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings(),
                                       database=database)
    assert set(shown.field_errors) == {"precision"}
    assert "pick bf16 or fp32" in shown.field_errors["precision"]
    assert "Precision (precision)" in shown.message


def register_slurm_executor(client, *, gpus_per_node: int, nodes: int = 4, cpus: int = 64):
    partition = {"name": "gpu", "nodes": nodes, "cpus_per_node": cpus,
                 "gpus_per_node": gpus_per_node, "idle_nodes": nodes, "allocated_nodes": 0,
                 "max_nodes": None}
    with client.app_state.database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name="slurm@login", host="login", queues=["default"], pid=12,
            concurrency=32, resources={"gpus": None, "cpu_count": 8, "slurm": partition},
            started_at=utc_now())


def test_a_slurm_partition_refuses_more_nodes_or_gpus_than_it_has_naming_its_limits(client):
    register_slurm_executor(client, gpus_per_node=8)
    response = client.post("/api/jobs", json={"max_steps": 5, "num_nodes": 8, "num_gpus": 16})
    assert response.status_code == 422
    problems = {problem["loc"][-1]: problem["msg"] for problem in response.json()["detail"]}
    assert "Slurm partition gpu has 4" in problems["num_nodes"]
    assert "Slurm partition gpu has 8 GPUs a node" in problems["num_gpus"]
    # A GPU partition runs fp16 under ZeRO-2: no CPU-host refusal for a Slurm executor.
    assert client.post("/api/jobs", json={**SPEC, "num_nodes": 4, "num_gpus": 8}).status_code == 201


def test_a_cpu_slurm_partition_counts_a_rank_a_cpu(client):
    register_slurm_executor(client, gpus_per_node=0, nodes=1, cpus=8)
    response = client.post("/api/jobs", json={"max_steps": 5, "num_gpus": 16})
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"][-1] == "num_gpus" and "no GPUs and 8 CPUs a node" in problem["msg"]
    assert client.post("/api/jobs", json=SPEC).status_code == 422  # fp16 + ZeRO-2, no GPU


def test_the_form_previews_the_sbatch_script_a_slurm_executor_would_submit(database):
    from app.auth.principal import OPEN_PRINCIPAL
    from app.ui.new_job import form_handlers
    from tunedeck.settings import Settings
    from tunedeck.slurm.sbatch_script import SlurmOptions, published_site

    site = published_site(SlurmOptions(partition="gpu", account="ml", time_limit="4:00:00"),
                          torchrun="/opt/td/.venv/bin/torchrun", runs_dir="/shared/runs",
                          environment={"TUNEDECK_HOME": "/shared/td"})
    partition = {"name": "gpu", "nodes": 4, "cpus_per_node": 64, "gpus_per_node": 8,
                 "idle_nodes": 4, "allocated_nodes": 0, "max_nodes": None, "site": site}
    with database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name="slurm@login", host="login", queues=["default"], pid=12,
            concurrency=32, resources={"gpus": None, "slurm": partition}, started_at=utc_now())
    form = {**form_handlers.default_form(), "num_gpus": 8}
    shown = form_handlers.preview_form(form, principal=OPEN_PRINCIPAL, settings=Settings(),
                                       database=database)
    script = shown.command_line
    assert script.startswith("#!/bin/bash\n# TuneDeck job <id>")
    for line in ("#SBATCH --job-name=tunedeck-<id>", "#SBATCH --nodes=1",
                 "#SBATCH --gpus-per-node=8", "#SBATCH --partition=gpu", "#SBATCH --account=ml",
                 "#SBATCH --time=4:00:00", "#SBATCH --output=/shared/runs/job-<id>/logs/slurm-%j.out",
                 "export TUNEDECK_HOME=/shared/td"):
        assert line in script.splitlines()
    assert "/opt/td/.venv/bin/torchrun --standalone --nnodes 1 --nproc_per_node 8" in script


def register_gpu_worker(client, *, speed_packages):
    with client.app_state.database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name="gpu@box", host="gpubox", queues=["default"], pid=13,
            concurrency=1, started_at=utc_now(),
            resources={"gpus": [{"index": 0, "id": "0", "model": "NVIDIA H200"}],
                       "speed_packages": speed_packages})


def test_gpu_speed_options_on_a_cpu_only_cluster_are_422s_naming_each_field(client):
    register_cpu_worker(client)
    response = client.post("/api/jobs", json={"max_steps": 5, "kernels": "liger",
                                              "attention": "flash"})
    assert response.status_code == 422
    problems = {tuple(problem["loc"]): problem["msg"] for problem in response.json()["detail"]}
    assert set(problems) == {("body", "kernels"), ("body", "attention")}
    assert "needs a CUDA GPU — set kernels to auto" in problems[("body", "kernels")]
    # What runs on any host is accepted there.
    assert client.post("/api/jobs", json={"max_steps": 5, "padding_free": True,
                                          "fused_optimizer": True}).status_code == 201


def test_a_speed_option_whose_package_no_gpu_worker_has_is_a_422_naming_the_package(client):
    register_gpu_worker(client, speed_packages=["liger_kernel"])
    assert client.post("/api/jobs", json={"max_steps": 5, "kernels": "liger"}).status_code == 201
    response = client.post("/api/jobs", json={"max_steps": 5, "attention": "flash"})
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "attention"]
    assert "no GPU worker that could take this job has flash-attn installed" in problem["msg"]


def test_a_worker_that_does_not_say_what_it_has_gets_the_benefit(client):
    register_gpu_worker(client, speed_packages=None)
    assert client.post("/api/jobs", json={"max_steps": 5, "attention": "flash"}).status_code == 201


def test_packages_that_no_single_gpu_worker_has_together_are_refused(client):
    register_gpu_worker(client, speed_packages=["liger_kernel"])
    with client.app_state.database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name="gpu@box2", host="gpubox2", queues=["default"], pid=14,
            concurrency=1, started_at=utc_now(),
            resources={"gpus": [{"index": 0, "id": "0", "model": "NVIDIA H200"}],
                       "speed_packages": ["flash_attn"]})
    response = client.post("/api/jobs", json={"max_steps": 5, "kernels": "liger",
                                              "attention": "flash"})
    assert response.status_code == 422
    messages = [problem["msg"] for problem in response.json()["detail"]]
    assert all("has liger-kernel and flash-attn installed together" in message
               for message in messages), messages
