"""Preference records in the layouts people have (strings; two chats sharing their prompt, as
the binarized feedback sets lay them out; a prompt with one-turn answers), each read into a
pair, and each bad record refused naming its number and what is wrong."""
from __future__ import annotations

import pytest

from tunedeck.data.preference_records import PreferenceColumns, pair_from_record, pairs_from_records

WHERE = "dataset prefs.jsonl"


def pair(record, **columns):
    return pair_from_record(record, index=7, where=WHERE, columns=PreferenceColumns(**columns))


def test_the_three_layouts_read_into_the_same_pair():
    strings = pair({"prompt": "2 + 2?", "chosen": "4", "rejected": "5"})
    chats = pair({"chosen": [{"role": "user", "content": "2 + 2?"},
                             {"role": "assistant", "content": "4"}],
                  "rejected": [{"role": "user", "content": "2 + 2?"},
                               {"role": "assistant", "content": "5"}]})
    prompt_and_turns = pair({"prompt": "2 + 2?",
                             "chosen": [{"role": "assistant", "content": "4"}],
                             "rejected": [{"role": "assistant", "content": "5"}]})
    assert strings == chats == prompt_and_turns
    assert strings.prompt_messages == ({"role": "user", "content": "2 + 2?"},)
    assert (strings.chosen, strings.rejected, strings.same_answers) == ("4", "5", False)


def test_a_multi_turn_chat_keeps_every_turn_before_the_answer_as_the_prompt():
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
             {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "2 + 2?"}]
    read = pair({"chosen": [*turns, {"role": "assistant", "content": "4"}],
                 "rejected": [*turns, {"role": "assistant", "content": "four, I think"}]})
    assert read.prompt_messages == tuple(turns) and read.rejected == "four, I think"


def test_mapped_columns_are_read():
    read = pair({"question": "2 + 2?", "good": "4", "bad": "4"},
                prompt="question", chosen="good", rejected="bad")
    assert read.chosen == "4" and read.same_answers


@pytest.mark.parametrize("record,message", [
    ({"prompt": "q", "chosen": "a"}, "record 7 has no column 'rejected'; its columns are "
                                     "['chosen', 'prompt']"),
    ({"prompt": "q", "chosen": "  ", "rejected": "b"}, "record 7: chosen is empty"),
    ({"prompt": "q", "chosen": "a", "rejected": ""}, "record 7: rejected is empty"),
    ({"prompt": " ", "chosen": "a", "rejected": "b"}, "record 7: the prompt is empty"),
    ({"chosen": "a", "rejected": "b"}, "record 7 has no prompt"),
    ({"prompt": "q", "chosen": 3, "rejected": "b"}, "record 7 chosen is a int"),
    ({"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
      "rejected": [{"role": "user", "content": "other"}, {"role": "assistant", "content": "b"}]},
     "record 7: chosen and rejected differ before their last assistant turn"),
    ({"chosen": [{"role": "user", "content": "q"}],
      "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}]},
     "record 7 chosen must end with an assistant turn"),
    (["q", "a", "b"], "record 7 is a list"),
])
def test_a_bad_record_is_refused_by_number_and_reason(record, message):
    with pytest.raises(ValueError) as refused:
        pair(record)
    assert str(refused.value).startswith(f"{WHERE}: ") and message in str(refused.value)


def test_an_empty_file_is_refused():
    with pytest.raises(ValueError, match="dataset prefs.jsonl: no records"):
        pairs_from_records([], source="prefs.jsonl")
