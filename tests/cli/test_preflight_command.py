"""`tunedeck preflight SPEC.yaml` before it reaches a server: the spec file's data fields,
a bad one named; the run through a real server is tests/e2e/test_preflight_end_to_end.py."""
from tests.cli.test_cli import tunedeck


def test_a_bad_or_unknown_field_is_named_before_anything_is_sent(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("max_steps: 3\nsq_len: 64\n")
    result = tunedeck("preflight", spec, "--server", "http://127.0.0.1:9")
    assert result.returncode != 0 and f"{spec}: sq_len: not a job spec field" in result.stderr
    spec.write_text("max_steps: 3\nseq_len: 4\n")
    result = tunedeck("preflight", spec, "--server", "http://127.0.0.1:9")
    assert result.returncode != 0
    assert f"{spec}: invalid preflight request\nseq_len: " in result.stderr


def test_a_whole_job_spec_is_read_for_its_data_fields_and_sent(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("max_steps: 3\nbackend: fsdp\nlora: {r: 8}\ndataset: builtin:arithmetic\n")
    result = tunedeck("preflight", spec, "--server", "http://127.0.0.1:9")
    assert result.returncode != 0 and "cannot reach TuneDeck at http://127.0.0.1:9" in result.stderr
