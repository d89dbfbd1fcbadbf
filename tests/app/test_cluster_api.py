"""`GET /api/workers` and the Cluster tab's tables, from heartbeats stored in the database."""
from datetime import timedelta

from sqlalchemy import update

from app.ui.cluster.cluster_handlers import cluster_tables
from tunedeck.jobs import store as job_store
from tunedeck.cluster import workers as worker_registry
from tunedeck.db.models import Worker, utc_now
from tunedeck.spec.job_spec import JobSpec

GPUS = [{"index": index, "id": str(index), "model": "NVIDIA H100 80GB HBM3",
         "used_mb": 1000.0 * (index + 1), "total_mb": 81559.0, "utilization_percent": 50}
        for index in range(4)]


def populate(database) -> tuple[int, int]:
    with database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name="default@gpu-1", host="gpu-1", queues=["default"], pid=10,
            concurrency=4, resources={"gpus": GPUS, "cpu_count": 64}, started_at=utc_now())
        worker_registry.record_heartbeat(
            session=session, name="cpu@box", host="box", queues=["cpu"], pid=11, concurrency=1,
            resources={"gpus": None, "cpu_count": 2, "memory_available_mb": 20000.0},
            started_at=utc_now())
        session.execute(update(Worker).where(Worker.name == "cpu@box")
                        .values(last_seen_at=utc_now() - timedelta(seconds=300)))
        running = job_store.create_job(session=session, spec=JobSpec(max_steps=5, num_gpus=2)).id
        job_store.mark_job_running(session=session, job_id=running, run_dir="/r", worker_host="gpu-1",
                                   worker_name="default@gpu-1", gpu_indices=[0, 1])
        queued = job_store.create_job(session=session,
                                      spec=JobSpec(max_steps=5, num_gpus=8)).id
    return running, queued


def test_workers_route_lists_gpus_with_free_memory_and_the_job_holding_each(client):
    running, queued = populate(client.app_state.database)
    overview = client.get("/api/workers").json()
    workers = {worker["name"]: worker for worker in overview["workers"]}
    gpu_worker = workers["default@gpu-1"]
    assert gpu_worker["state"] == "online" and gpu_worker["queues"] == ["default"]
    assert [gpu["job_id"] for gpu in gpu_worker["gpus"]] == [running, running, None, None]
    assert gpu_worker["gpus"][0]["free_mb"] == 81559.0 - 1000.0
    assert gpu_worker["jobs"] == [{"id": running, "name": gpu_worker["jobs"][0]["name"],
                                   "node_rank": 0, "gpu_indices": [0, 1], "num_gpus": 2,
                                   "num_nodes": 1}]
    # Still marked online, but silent past the limit: the page says so before the sweep runs.
    assert workers["cpu@box"]["state"] == "silent" and workers["cpu@box"]["gpus"] is None
    assert overview["queued"] == [{
        "id": queued, "name": overview["queued"][0]["name"], "queue": "default", "host": None,
        "num_gpus": 8, "waiting": "waiting: the job needs 8 GPUs on one host, and the largest "
                                  "worker of queue 'default' has 4; lower num_gpus or add a "
                                  "bigger worker"}]


def test_cluster_tab_tables(database):
    running, queued = populate(database)
    shown = cluster_tables(database=database, worker_lost_seconds=20)
    workers, gpus, waiting = shown.workers, shown.gpus, shown.queued
    rows = workers.set_index("worker")
    assert rows.loc["default@gpu-1", "resources"] == "4 x NVIDIA H100 80GB HBM3, 2 free"
    assert rows.loc["default@gpu-1", "jobs running"] == f"job {running} (GPUs 0,1)"
    assert rows.loc["cpu@box", "state"] == "silent"
    assert rows.loc["cpu@box", "resources"].startswith("no GPU: 2 CPU cores, 21.0 GB RAM free")
    assert list(gpus["job"]) == [f"job {running}", f"job {running}", "free", "free"]
    assert list(gpus["free GB"])[2] == "82.4"  # (81559 - 3000) MiB
    assert list(waiting["id"]) == [queued]
    assert shown.cpu_hosts == ""  # the CPU worker is silent: only online hosts are told


def test_a_cpu_host_is_described_instead_of_an_empty_gpu_table(database):
    with database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name="default@laptop", host="laptop", queues=["default"], pid=7,
            concurrency=1, resources={"gpus": None, "cpu_count": 2}, started_at=utc_now())
    shown = cluster_tables(database=database, worker_lost_seconds=20)
    assert shown.gpus.empty
    assert shown.cpu_hosts == ("- **laptop** (default@laptop): CPU host, 2 cores; jobs run on "
                               "CPU ranks, one at a time")


def test_a_slurm_executor_shows_its_partition_and_its_jobs_wait_with_slurms_reason(database):
    partition = {"name": "gpu", "nodes": 4, "cpus_per_node": 64, "gpus_per_node": 8,
                 "idle_nodes": 1, "allocated_nodes": 3, "max_nodes": None}
    with database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name="slurm@login", host="login", queues=["default"], pid=7,
            concurrency=32, resources={"gpus": None, "cpu_count": 8, "slurm": partition},
            started_at=utc_now())
        waiting = job_store.create_job(session=session, spec=JobSpec(max_steps=5, num_gpus=8)).id
        job_store.record_slurm_submission(session=session, job_id=waiting, slurm_job_id="4242",
                                          worker_name="slurm@login", run_dir="/shared/job")
        job_store.note_job_waiting(session=session, job_id=waiting, reason=(
            "Slurm job 4242: waiting for resources on partition gpu"))
    shown = cluster_tables(database=database, worker_lost_seconds=20)
    assert shown.cpu_hosts == ("- **slurm@login**: Slurm executor on login, partition gpu: 4 "
                               "node(s) of 8 GPUs and 64 CPUs, 1 idle, 3 allocated")
    assert shown.workers.iloc[0]["resources"].startswith("Slurm partition gpu")
    assert list(shown.queued["waiting for"]) == [
        "Slurm job 4242: waiting for resources on partition gpu"]
