from tunedeck.metrics.events import encode_event
from tunedeck.run_folder import RunFolder
from worker.metrics_tail import MetricsTail


def test_tail_returns_whole_new_lines_once_with_their_numbers(tmp_path):
    run = RunFolder(tmp_path)
    run.metrics_dir.mkdir()
    rank0, rank1 = run.rank_metrics_file(0), run.rank_metrics_file(1)
    tail = MetricsTail(run)
    assert tail.read_new_events() == []

    rank0.write_text(encode_event("step", rank=0, time=1.0, step=1, loss=3.0)
                     + '{"kind": "step", "rank": 0, "ti')  # a line still being written
    rank1.write_text(encode_event("notice", rank=1, time=1.0, level="info", message="hi")
                     + "not json\n")
    first = tail.read_new_events()
    assert [(seq, e["rank"], e["kind"]) for seq, e in first] == [(0, 0, "step"), (0, 1, "notice")]

    with rank0.open("a") as file:
        file.write('me": 2.0, "step": 2, "loss": 2.0}\n')
    second = tail.read_new_events()
    assert [(seq, e["step"]) for seq, e in second] == [(1, 2)]
    assert tail.read_new_events() == []


def test_line_numbers_count_skipped_lines_so_reingest_is_idempotent(tmp_path):
    run = RunFolder(tmp_path)
    run.metrics_dir.mkdir()
    run.rank_metrics_file(0).write_text("garbage\n" + encode_event("step", rank=0, time=1.0, step=1))
    assert [seq for seq, _ in MetricsTail(run).read_new_events()] == [1]
