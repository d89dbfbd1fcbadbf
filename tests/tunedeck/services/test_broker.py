"""The embedded broker: kombu's filesystem transport under TUNEDECK_HOME."""
from __future__ import annotations

import logging
import threading

from tunedeck.services.broker import RUN_JOB_TASK, make_celery
from tunedeck.settings import Settings


def test_sending_on_the_embedded_broker_logs_no_kombu_warning(tmp_path, caplog):
    # A URL with no host made kombu warn "No hostname was supplied" on each connection: at
    # every start of `tunedeck up`, once for the web and thrice for the worker.
    celery_app = make_celery(Settings(home=tmp_path))
    with caplog.at_level(logging.WARNING, logger="kombu"):
        celery_app.send_task(RUN_JOB_TASK, args=[1])
        with celery_app.connection_for_read() as connection:
            connection.ensure_connection(max_retries=1)
            connection.clone().close()
    assert [record.getMessage() for record in caplog.records] == []
    assert list((tmp_path / "broker" / "queue").iterdir())  # the message is in the folder


def test_a_worker_reading_the_queue_while_the_web_sends_never_reads_half_a_message(tmp_path):
    # kombu's own transport created the file in the queue folder before writing it, and a
    # reader between the two read an empty message: the worker's consumer stopped on it.
    from kombu.transport.virtual import Empty

    from tunedeck.services.broker import JOBS_QUEUE
    from tunedeck.services.broker_files import Transport

    sender, receiver = make_celery(Settings(home=tmp_path)), make_celery(Settings(home=tmp_path))
    sent, received, failures = 300, [], []
    with receiver.connection_for_read() as reading:
        assert reading.get_transport_cls() is Transport
        channel = reading.default_channel
        done = threading.Event()

        def read_all():
            while len(received) < sent and not done.is_set():
                try:
                    received.append(channel._get(JOBS_QUEUE))
                except Empty:
                    continue
                except Exception as error:  # noqa: BLE001 (what the worker's consumer met)
                    failures.append(error)

        reader = threading.Thread(target=read_all)
        reader.start()
        try:
            for job_id in range(sent):
                sender.send_task(RUN_JOB_TASK, args=[job_id], queue=JOBS_QUEUE)
            reader.join(timeout=60)
        finally:
            done.set()
            reader.join()
    assert failures == [] and len(received) == sent
    assert not list((tmp_path / "broker" / "writing").iterdir())  # nothing left half-written
