"""The job page's log tail leaves out library warnings and progress-bar redraws and says how
many lines it left out; the full log download keeps every byte."""
from __future__ import annotations

from pathlib import Path

from app.auth.principal import OPEN_PRINCIPAL
from app.ui.job_page import job_handlers
from app.ui.job_page.job_page_layout import log_html
from app.views.log_noise import quiet_log_tail
from tunedeck.jobs import store as job_store
from tunedeck.spec.job_spec import JobSpec
from tunedeck.run_folder import RunFolder

# A real torchrun log, as written (`torchrun --nproc-per-node 2 --tee 3`, 2 CPU ranks,
# transformers 5.25, torch 2.13): each rank loads a model (a tqdm bar, whose redraws torchrun
# writes as lines of their own), reads a deprecated transformers property, calls torch's
# checkpoint without use_reentrant, and warns from its own script.
RANK_LOG = (Path(__file__).parent / "torchrun_log_with_library_warnings.txt").read_text()
RANK_LINES = RANK_LOG.splitlines()


def test_library_warnings_their_source_lines_and_unfinished_bars_are_left_out():
    tail = quiet_log_tail(RANK_LINES, keep=200)
    rank_0 = [
        "[default0]:step 1/3 loss 6.2668",
        "[default0]:step 3/3 loss 5.1501",
        "[default0]:",
        "[default0]:Loading weights: 100%|██████████| 21/21 [00:00<00:00, 17369.43it/s]",
        # Not a library's: it may be why the job failed.
        "[default0]:/tmp/wt1/tr/rank.py:8: UserWarning: the job's own code warns",
        """[default0]:  warnings.warn("the job's own code warns")""",
    ]
    assert tail.lines[:6] == rank_0
    assert [line.replace("default1", "default0") for line in tail.lines[6:]] == [
        line.replace("17369.43", "19214.74") for line in rank_0]
    assert tail.hidden == 10  # per rank: two warnings with their source lines, a bar's 0%


def test_a_source_line_is_left_out_after_its_own_ranks_warning_only():
    # Ranks' lines interleave in a log: the same real lines, rank 1's between rank 0's.
    warning_0, source_0 = RANK_LINES[5:7]
    warning_1, source_1 = RANK_LINES[16:18]
    own_warning_1, own_source_1 = RANK_LINES[20:22]
    interleaved = [warning_0, own_warning_1, source_0, own_source_1, warning_1, source_1]
    assert quiet_log_tail(interleaved, keep=10).lines == [own_warning_1, own_source_1]


def test_the_tail_keeps_its_length_and_counts_only_the_noise_among_its_lines():
    tail = quiet_log_tail(RANK_LINES, keep=3)
    assert tail.lines == [RANK_LINES[15], *RANK_LINES[-2:]]
    assert tail.hidden == 4  # rank 1's two warnings and their source lines
    assert quiet_log_tail([], keep=3).lines == []


def test_the_page_says_what_it_left_out_and_the_download_keeps_every_byte(client, tmp_path):
    database = client.app_state.database
    with database.transaction() as session:
        job_id = job_store.create_job(session=session, spec=JobSpec(max_steps=3)).id
    run = RunFolder(tmp_path / f"job-{job_id}")
    run.logs_dir.mkdir(parents=True)
    run.launcher_log_file.write_text(RANK_LOG)
    with database.transaction() as session:
        job_store.mark_job_running(session=session, job_id=job_id, run_dir=str(run.path),
                                   worker_host="h")
    page = job_handlers.load_job_page(job_id, database=database, principal=OPEN_PRINCIPAL)
    assert "FutureWarning" not in page.log_tail and page.log_hidden_lines == 10
    shown = log_html(page.log_tail, page.log_link_html, page.log_hidden_lines)
    assert "10 lines of library warnings and progress bars left out, the full log has them" in shown
    assert "left out" not in log_html("step 1", "")
    assert client.get(f"/api/jobs/{job_id}/logs/full").content == run.launcher_log_file.read_bytes()
