"""The data preflight (trainer/data/dataset_preflight.py) on real files and the built-in
tokenizer: its counts are the trainer's own tokenization's, exactly."""
from __future__ import annotations

import json

import pytest

from trainer.data.dataset_preflight import preflight_report
from trainer.data.datasets import IGNORE_INDEX, load_examples, tokenize_examples
from tunedeck.data.preflight_text import marked_text, summary_lines
from tunedeck.job_spec import JobSpec

SEQ_LEN = 64


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def spec_for(path, **fields) -> JobSpec:
    return JobSpec(dataset=str(path), seq_len=SEQ_LEN, max_steps=1, **fields)


def mixed_records() -> list[dict]:
    """7 that fit, 2 whose answer seq_len cuts, 1 whose prompt alone fills seq_len: of 10,
    3 (30%) are longer than seq_len, 3 lose answer tokens, 1 is left with none."""
    fitting = [{"prompt": f"What is {n} + 1?", "response": str(n + 1)} for n in range(7)]
    long_answers = [{"prompt": f"Count to {n}.", "response": "one two three " * 30}
                    for n in (50, 60)]
    long_prompt = [{"prompt": "word " * 100, "response": "ok"}]
    return [*fitting[:2], long_answers[0], *fitting[2:5], long_prompt[0], long_answers[1],
            *fitting[5:]]


def test_the_shares_over_seq_len_losing_answer_tokens_and_dropped_are_exact(tmp_path,
                                                                            builtin_tokenizer):
    path = write_jsonl(tmp_path / "mixed.jsonl", mixed_records())
    report = preflight_report(spec_for(path), tokenizer=builtin_tokenizer)
    assert report["records"] == 10 and report["sample"]["sampled"] is False
    assert report["over_seq_len"] == {"count": 3, "share": 0.3}
    assert report["lose_answer_tokens"] == {"count": 3, "share": 0.3}
    assert report["dropped_empty"] == {"count": 1, "share": 0.1}
    # Dropped as the trainer drops: tokenize_examples keeps the other 9.
    kept = tokenize_examples(builtin_tokenizer, load_examples(str(path)), SEQ_LEN, source="test")
    assert len(kept) == 10 - report["dropped_empty"]["count"]
    over_bins = [bin_ for bin_ in report["histogram"] if bin_["over_seq_len"]]
    assert sum(bin_["count"] for bin_ in over_bins) == 3
    assert sum(bin_["count"] for bin_ in report["histogram"]) == 10
    assert any(bin_["high"] == SEQ_LEN for bin_ in report["histogram"])
    assert report["lengths"]["max"] > SEQ_LEN and report["answer_tokens"]["cut"] > 0
    assert "30.0% (3) lose answer tokens at seq_len 64" in report["warnings"][0]
    assert "3 (30.0%) lose answer tokens to truncation" in summary_lines(report)


@pytest.mark.parametrize("chat_template", [True, False], ids=["chat-template", "plain-prompt"])
def test_the_marked_span_is_the_labels_the_trainer_trains_on(tmp_path, builtin_model_dir,
                                                             chat_template):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(builtin_model_dir)
    if not chat_template:
        tokenizer.chat_template = None
    path = write_jsonl(tmp_path / "mixed.jsonl", mixed_records())
    examples = load_examples(str(path))
    report = preflight_report(spec_for(path), tokenizer=tokenizer)
    first, cut = report["examples"]
    assert (first["record"], cut["record"]) == (1, 3)
    for shown in (first, cut):
        [trained_on] = tokenize_examples(tokenizer, [examples[shown["record"] - 1]], SEQ_LEN,
                                         source="test")
        assert shown["token_ids"] == trained_on.input_ids
        assert shown["trained"] == [label != IGNORE_INDEX for label in trained_on.labels]
        assert shown["trained_tokens"] == sum(shown["trained"])
    parts = [segment["part"] for segment in first["segments"]]
    assert parts == ["prompt", "trained"] and first["cut_tokens"] == 0
    answer_ids = [label for label in trained_on.labels if label != IGNORE_INDEX]
    assert [segment["part"] for segment in cut["segments"]] == ["prompt", "trained", "cut"]
    assert cut["segments"][1]["text"] == tokenizer.decode(answer_ids)
    assert cut["tokens"] == len(trained_on.input_ids) + cut["cut_tokens"] > SEQ_LEN
    trained_text = first["segments"][1]["text"]
    assert trained_text.startswith("1")  # record 1's answer, then the end of its turn
    assert trained_text.endswith(tokenizer.eos_token + ("\n" if chat_template else ""))
    assert "[[1" in marked_text(first) and "<<cut: " in marked_text(cut)


def test_duplicates_are_identical_prompt_and_answer_records(tmp_path, builtin_tokenizer):
    same = {"prompt": "Capital of France?", "response": "Paris"}
    other = {"prompt": "2 + 2?", "response": "4"}
    records = [same, other, same, {"prompt": "Capital of France?", "response": "Lyon"},
               same, other, {"instruction": "Capital of France?", "output": "Paris"}]
    path = write_jsonl(tmp_path / "dupes.jsonl", records)
    report = preflight_report(spec_for(path), tokenizer=builtin_tokenizer)
    # The alpaca record is the same conversation as `same`; "Lyon" is another answer.
    assert report["duplicates"] == {"records": 4, "groups": 2,
                                    "largest_group": {"count": 4, "records": [1, 3, 5, 7]}}
    assert any("4 records repeat" in warning for warning in report["warnings"])


def test_above_the_sample_limit_a_seeded_sample_is_tokenized_and_said_so(tmp_path,
                                                                         builtin_tokenizer):
    records = [{"prompt": f"What is {n} + 1?", "response": str(n + 1)} for n in range(50)]
    path = write_jsonl(tmp_path / "many.jsonl", records)
    report = preflight_report(spec_for(path), tokenizer=builtin_tokenizer, sample_limit=20)
    again = preflight_report(spec_for(path), tokenizer=builtin_tokenizer, sample_limit=20)
    assert report["records"] == 50  # counted exactly
    assert report["sample"] == {"tokenized": 20, "sampled": True, "limit": 20, "seed": 0}
    assert sum(bin_["count"] for bin_ in report["histogram"]) == 20
    assert report["histogram"] == again["histogram"] and report["examples"] == again["examples"]
    assert report["examples"][0]["record"] == 1  # shown even when the sample skips it
    assert "a seeded sample of 20 tokenized (seed 0)" in summary_lines(report)[0]
    whole = preflight_report(spec_for(path), tokenizer=builtin_tokenizer)
    assert whole["sample"]["sampled"] is False and "all tokenized" in summary_lines(whole)[0]


def test_the_spec_columns_packing_and_eval_split_are_applied(tmp_path, builtin_tokenizer):
    records = [{"question": f"What is {n} + 1?", "answer": str(n + 1)} for n in range(20)]
    path = write_jsonl(tmp_path / "qa.jsonl", records)
    spec = spec_for(path, columns={"prompt": "question", "response": "answer"}, packing=True,
                    eval_split=0.1)
    report = preflight_report(spec, tokenizer=builtin_tokenizer)
    assert report["records"] == 20 and report["eval_held_out"] == 2
    assert 0 < report["packing"]["rows"] < 20 and 0 < report["packing"]["fill"] <= 1
    with pytest.raises(ValueError, match=r"dataset .*qa.jsonl: record 1 has keys"):
        preflight_report(spec_for(path), tokenizer=builtin_tokenizer)
