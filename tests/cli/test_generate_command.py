"""`tunedeck generate ID PROMPT` before it reaches a server: its options, and a server it
cannot reach named; the run through a real server is tests/e2e/test_generate_end_to_end.py."""
from tests.cli.test_cli import tunedeck
from tunedeck.generation.answer_text import short_seconds, speed_text


def test_a_generation_time_under_a_second_is_said_in_milliseconds():
    assert speed_text(2, 0.0034) == "2 tokens in 3.4 ms (588 tokens/s)"
    assert speed_text(128, 2.5) == "128 tokens in 2.50 s (51 tokens/s)"
    assert speed_text(0, 0.0002) == "0 tokens in 0.2 ms"
    assert short_seconds(0.2534) == "253 ms"


def test_the_options_are_checked_and_an_unreachable_server_is_named():
    result = tunedeck("generate", "3", "hi", "--variant", "lora", "--server", "http://127.0.0.1:9")
    assert result.returncode == 2 and "invalid choice: 'lora'" in result.stderr
    result = tunedeck("generate", "three", "hi")
    assert result.returncode == 2 and "invalid int value: 'three'" in result.stderr
    result = tunedeck("generate", "3", "hi", "--temperature", "0", "--server", "http://127.0.0.1:9")
    assert result.returncode != 0 and "cannot reach TuneDeck at http://127.0.0.1:9" in result.stderr
