"""`tunedeck generate ID PROMPT` before it reaches a server: its options, and a server it
cannot reach named; the run through a real server is tests/e2e/test_generate_end_to_end.py."""
from tests.tunedeck.cli.test_cli import tunedeck


def test_the_options_are_checked_and_an_unreachable_server_is_named():
    result = tunedeck("generate", "3", "hi", "--variant", "lora", "--server", "http://127.0.0.1:9")
    assert result.returncode == 2 and "invalid choice: 'lora'" in result.stderr
    result = tunedeck("generate", "three", "hi")
    assert result.returncode == 2 and "invalid int value: 'three'" in result.stderr
    result = tunedeck("generate", "3", "hi", "--temperature", "0", "--server", "http://127.0.0.1:9")
    assert result.returncode != 0 and "cannot reach TuneDeck at http://127.0.0.1:9" in result.stderr
