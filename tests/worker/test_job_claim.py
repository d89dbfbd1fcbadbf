"""A worker receiving a job's id: it claims the row with GPUs no other job of it holds,
hands the id on to a worker with room, or leaves it queued saying what it waits for."""
import threading

from tunedeck.jobs import queries as job_queries

from tunedeck.jobs import store as job_store
from tunedeck.cluster import workers as worker_registry
from tunedeck.db.models import utc_now
from tunedeck.spec.job_spec import JobSpec
from worker.job_claim import claim_job, jobs_to_offer
from worker.worker_identity import WorkerIdentity, discover_gpu_ids

EIGHT_GPUS = WorkerIdentity(name="default@gpu-1", host="gpu-1", queues=("default",),
                            gpu_ids=tuple(range(8)), concurrency=8)
OTHER = WorkerIdentity(name="default@gpu-2", host="gpu-2", queues=("default",),
                       gpu_ids=("GPU-aaaa", "GPU-bbbb"), concurrency=2)


def submit(database, **spec) -> int:
    with database.transaction() as session:
        return job_store.create_job(session=session, spec=JobSpec(max_steps=5, **spec)).id


def heartbeat(database, identity: WorkerIdentity) -> None:
    gpus = [{"index": index, "id": str(gpu)} for index, gpu in enumerate(identity.gpu_ids or ())]
    with database.transaction() as session:
        worker_registry.record_heartbeat(
            session=session, name=identity.name, host=identity.host, queues=identity.queues,
            pid=1, concurrency=identity.concurrency,
            resources={"gpus": gpus if identity.gpu_ids is not None else None},
            started_at=utc_now())


def claim(database, job_id: int, identity: WorkerIdentity = EIGHT_GPUS):
    return claim_job(job_id, identity=identity, database=database, run_dir=f"/runs/{job_id}",
                     worker_lost_seconds=20)


def test_two_four_gpu_jobs_run_side_by_side_on_disjoint_gpus_and_a_third_waits(database):
    jobs = [submit(database, num_gpus=4) for _ in range(3)]
    # Two threads of the worker claim at once: the lock keeps their GPUs apart.
    claims = {}
    threads = [threading.Thread(target=lambda job_id=job_id: claims.__setitem__(
        job_id, claim(database, job_id))) for job_id in jobs[:2]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(sorted(claims[job_id].gpus) for job_id in jobs[:2]) == [[0, 1, 2, 3],
                                                                         [4, 5, 6, 7]]
    heartbeat(database, EIGHT_GPUS)
    third = claim(database, jobs[2])
    assert (third.status, third.spec, third.hand_on_to) == ("queued", None, None)
    with database.transaction() as session:
        events = job_queries.list_job_events(session=session, job_id=jobs[2])
        row = job_queries.get_job(session=session, job_id=jobs[0])
    assert events[-1].message == "waiting for 4 free GPU(s) on a worker of queue 'default'"
    assert (row.status, row.worker_name) == ("running", "default@gpu-1")
    assert EIGHT_GPUS.cuda_visible_devices(row.gpu_indices) in ("0,1,2,3", "4,5,6,7")


def test_jobs_start_in_submission_order_whichever_message_is_read_first(database):
    heartbeat(database, EIGHT_GPUS)
    first, second, third = (submit(database, num_gpus=4) for _ in range(3))
    # The third's message reaches a thread first: the two older jobs fill the 8 GPUs.
    early = claim(database, third)
    assert (early.status, early.spec, early.hand_on_to) == ("queued", None, None)
    assert claim(database, second).gpus == [4, 5, 6, 7]  # the lowest kept for the first
    assert claim(database, first).gpus == [0, 1, 2, 3]
    with database.transaction() as session:
        assert job_queries.list_job_events(session=session, job_id=third)[-1].message == \
            f"waiting for 4 free GPU(s) on a worker of queue 'default'; jobs {first}, " \
            f"{second}, queued before it, start first"


def test_an_older_job_too_big_for_the_free_gpus_holds_no_room_back(database):
    heartbeat(database, EIGHT_GPUS)
    busy = submit(database, num_gpus=6)
    assert claim(database, busy).gpus == [0, 1, 2, 3, 4, 5]
    big, small = submit(database, num_gpus=4), submit(database, num_gpus=2)
    assert claim(database, small).gpus == [6, 7]  # the 4-GPU job could not use them now
    assert claim(database, big).status == "queued"


def test_a_job_this_worker_has_no_room_for_is_handed_to_a_worker_that_has(database):
    heartbeat(database, EIGHT_GPUS)
    heartbeat(database, OTHER)
    busy = submit(database, num_gpus=8)
    assert claim(database, busy).gpus == list(range(8))
    waiting = submit(database, num_gpus=2)
    handed = claim(database, waiting)
    assert (handed.status, handed.hand_on_to) == ("queued", "default@gpu-2")
    taken = claim(database, waiting, OTHER)
    assert taken.gpus == [0, 1] and OTHER.cuda_visible_devices(taken.gpus) == "GPU-aaaa,GPU-bbbb"


def test_a_job_for_another_queue_or_host_is_not_claimed_and_says_why(database):
    heartbeat(database, EIGHT_GPUS)
    elsewhere = submit(database, queue="h100")
    result = claim(database, elsewhere)
    assert result.spec is None and result.hand_on_to is None
    with database.transaction() as session:
        assert job_queries.list_job_events(session=session, job_id=elsewhere)[-1].message == \
            "waiting: no live worker serves queue 'h100'"
        assert job_queries.get_job(session=session, job_id=elsewhere).status == "queued"
    pinned = submit(database, host="gpu-1")
    assert claim(database, pinned).gpus == [0]
    assert jobs_to_offer(identity=EIGHT_GPUS, database=database) == []


def test_a_claimed_or_cancelled_job_is_left_alone(database):
    job_id = submit(database)
    assert claim(database, job_id).status == "running"
    assert claim(database, job_id, OTHER).status == "running"  # someone else's now
    cancelled = submit(database)
    with database.transaction() as session:
        job_store.request_cancel(session=session, job_id=cancelled)
    assert claim(database, cancelled).status == "cancelled"


def test_gpus_come_from_the_setting_or_cuda_visible_devices():
    assert discover_gpu_ids("2,3", {"CUDA_VISIBLE_DEVICES": "0"}) == (2, 3)
    assert discover_gpu_ids(None, {"CUDA_VISIBLE_DEVICES": "GPU-aaaa,1"}) == ("GPU-aaaa", 1)
    assert discover_gpu_ids(None, {"CUDA_VISIBLE_DEVICES": ""}) is None


def test_the_default_worker_name_makes_broker_queues_the_embedded_broker_accepts(tmp_path):
    import re

    from tunedeck.cluster.placement import broker_queues_of_worker
    from tunedeck.settings import Settings

    identity = WorkerIdentity.from_settings(Settings(home=tmp_path, worker_queues="a100,default"),
                                            environ={"CUDA_VISIBLE_DEVICES": ""})
    queues = broker_queues_of_worker(name=identity.name, host=identity.host,
                                     queues=identity.queues)
    # kombu's filesystem transport refuses any other character in a queue's exchange name.
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", queue) for queue in queues), queues
    assert identity.concurrency == 1 and identity.gpu_ids is None


def test_a_job_on_two_nodes_is_claimed_with_a_second_worker_that_has_room(database):
    heartbeat(database, EIGHT_GPUS)
    heartbeat(database, OTHER)
    job_id = submit(database, num_gpus=2, num_nodes=2, backend="fsdp")
    lead = claim(database, job_id)
    assert lead.gpus == [0, 1] and lead.followers == [(1, "default@gpu-2")]
    assert lead.rendezvous.startswith("gpu-1:")
    with database.transaction() as session:
        nodes = job_queries.list_job_nodes(session=session, job_id=job_id)
        assert [(node.node_rank, node.worker_name, node.gpu_indices, node.state)
                for node in nodes] == [(1, "default@gpu-2", [0, 1], "assigned")]
        # The node's GPUs count as held on that worker: it has no room for another job.
        assert job_queries.worker_load(session=session, worker_name="default@gpu-2") == [[0, 1]]
        assert job_store.start_node(session=session, job_id=job_id, node_rank=1,
                                    worker_name="default@gpu-2")
        assert not job_store.start_node(session=session, job_id=job_id, node_rank=1,
                                        worker_name="default@gpu-2")  # once only
    another = submit(database, num_gpus=1)
    assert claim(database, another, OTHER).status == "queued"


def test_a_job_on_more_nodes_than_workers_waits_and_says_why(database):
    heartbeat(database, EIGHT_GPUS)
    job_id = submit(database, num_nodes=2, backend="fsdp")
    result = claim(database, job_id)
    assert (result.status, result.spec, result.followers) == ("queued", None, [])
    with database.transaction() as session:
        assert job_queries.list_job_events(session=session, job_id=job_id)[-1].message == (
            "waiting: the job runs on 2 nodes, one worker each, and 1 live worker(s) of queue "
            "'default' can hold a node of 1 GPU(s)")


def test_a_worker_without_the_speed_options_package_hands_the_job_to_one_that_has_it(database):
    from dataclasses import replace

    plain = replace(EIGHT_GPUS, speed_packages=frozenset())
    with_liger = replace(OTHER, speed_packages=frozenset({"liger_kernel"}))
    for identity in (plain, with_liger):
        with database.transaction() as session:
            worker_registry.record_heartbeat(
                session=session, name=identity.name, host=identity.host,
                queues=identity.queues, pid=1, concurrency=identity.concurrency,
                started_at=utc_now(),
                resources={"gpus": [{"index": index, "id": str(gpu)}
                                    for index, gpu in enumerate(identity.gpu_ids)],
                           "speed_packages": sorted(identity.speed_packages)})
    job = submit(database, kernels="liger")
    handed = claim(database, job, plain)
    assert (handed.status, handed.gpus, handed.hand_on_to) == ("queued", None, with_liger.name)
    assert claim(database, job, with_liger).gpus == [0]
