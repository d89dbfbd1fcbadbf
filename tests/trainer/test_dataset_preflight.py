"""The data preflight (trainer/data/dataset_preflight.py) on real files and the built-in
tokenizer: its counts are the trainer's own tokenization's, exactly."""
from __future__ import annotations

import json

import pytest

from trainer.data.dataset_preflight import preflight_report
from trainer.token_loss import IGNORE_INDEX
from trainer.data.datasets import load_examples, tokenize_examples
from tunedeck.data.preflight_text import marked_text, summary_lines
from tunedeck.spec.job_spec import JobSpec

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


# --- objective dpo: a report of preference pairs ------------------------------------------

def pair_records() -> list[dict]:
    """Of 5 pairs: 3 that fit (one with the same answer twice), 1 whose rejected answer seq_len
    cuts, 1 whose prompt alone fills seq_len (both sides keep no answer token); the first
    pair again at the end (a duplicate)."""
    fitting = [{"prompt": f"What is {n} + 1?", "chosen": f"{n} + 1 = {n + 1}.", "rejected": str(n)}
               for n in range(3)]
    fitting[1]["rejected"] = fitting[1]["chosen"]
    long_rejected = {"prompt": "Count.", "chosen": "one two", "rejected": "one two three " * 30}
    long_prompt = {"prompt": "word " * 100, "chosen": "ok", "rejected": "no"}
    return [*fitting[:2], long_rejected, fitting[2], long_prompt, fitting[0]]


def test_a_dpo_report_counts_pairs_same_answers_and_a_side_losing_its_answer(tmp_path,
                                                                             builtin_tokenizer):
    from trainer.data.preference_data import load_spec_pairs
    from trainer.data.preference_pairs import tokenize_pairs, trainable_pairs

    path = write_jsonl(tmp_path / "prefs.jsonl", pair_records())
    spec = spec_for(path, objective="dpo", eval_split=0.5)
    report = preflight_report(spec, tokenizer=builtin_tokenizer)
    assert report["objective"] == "dpo" and report["records"] == 6
    assert report["sample"] == {"tokenized": 6, "sampled": False, "limit": 5000, "seed": 0}
    assert report["same_answers"] == {"count": 1, "share": 1 / 6}
    assert report["over_seq_len"] == {"count": 2, "share": 2 / 6}
    assert report["lose_answer_tokens"] == {"count": 2, "share": 2 / 6}
    assert report["dropped_empty"] == {"count": 1, "share": 1 / 6}
    # Dropped as the trainer drops: trainable_pairs keeps the other 5.
    pairs = load_spec_pairs(spec)
    kept = trainable_pairs(tokenize_pairs(builtin_tokenizer, pairs, SEQ_LEN), seq_len=SEQ_LEN)
    assert len(kept) == 6 - report["dropped_empty"]["count"]
    # Token lengths are each side's: two a pair.
    assert sum(bin_["count"] for bin_ in report["histogram"]) == 12
    assert report["lengths"]["max"] > SEQ_LEN and report["answer_tokens"]["cut"] > 0
    assert report["duplicates"]["records"] == 1 and report["eval_held_out"] == 3
    first_chosen, first_rejected, cut = report["examples"]
    assert (first_chosen["record"], first_rejected["record"], cut["record"]) == (1, 1, 3)
    assert first_chosen["why"] == "the first pair's chosen answer"
    assert cut["why"] == "the first pair whose rejected answer seq_len cuts"
    assert "0 + 1 = 1." in marked_text(first_chosen) and "[[0" in marked_text(first_rejected)
    warnings = "\n".join(report["warnings"])
    assert "33.3% (2) lose answer tokens of a side at seq_len 64" in warnings
    assert "1 pairs (16.7%) have the same chosen and rejected answer" in warnings
    assert "1 keep no answer token of a side at seq_len 64: training drops them" in warnings
    lines = summary_lines(report)
    assert lines[0] == "6 preference pairs; all tokenized"
    assert "1 (16.7%) have the same chosen and rejected answer" in lines
    assert "2 (33.3%) lose answer tokens of a side to truncation" in lines
    assert "eval_split holds out 3 pairs" in lines


def test_a_dpo_report_renders_where_the_sft_report_does(tmp_path, builtin_tokenizer):
    """The CLI's text and the form's Check data panel, by their own renderers."""
    from app.ui.new_job.preflight_handlers import preflight_html
    from tunedeck.data.preflight_text import preflight_as_text

    path = write_jsonl(tmp_path / "prefs.jsonl", pair_records())
    report = preflight_report(spec_for(path, objective="dpo"), tokenizer=builtin_tokenizer,
                              sample_limit=8)
    assert report["sample"]["sampled"] and report["sample"]["tokenized"] == 4
    answer = {"id": 3, "status": "done", "worker_name": "w1", "report": report,
              "request": {"dataset": str(path)}}
    text = preflight_as_text(answer)
    assert "6 preference pairs; a seeded sample of 4 tokenized" in text
    assert "have the same chosen and rejected answer" in text
    assert "record 1 (the first pair's rejected answer)" in text and "token lengths:" in text
    shown = preflight_html(answer)
    assert "6 preference pairs" in shown and "lose answer tokens of a side" in shown
    assert "the first pair&#x27;s chosen answer" in shown and "<mark>" in shown


def test_a_dpo_preflight_of_data_without_pairs_names_its_columns(tmp_path, builtin_tokenizer):
    path = write_jsonl(tmp_path / "mixed.jsonl", mixed_records())
    with pytest.raises(ValueError, match=r"record 1 has no column 'chosen'; its columns are "
                                         r"\['prompt', 'response'\]"):
        preflight_report(spec_for(path, objective="dpo"), tokenizer=builtin_tokenizer)
    report = preflight_report(JobSpec(objective="dpo", dataset="builtin:arithmetic-preference",
                                      seq_len=SEQ_LEN, max_steps=1), tokenizer=builtin_tokenizer)
    assert report["records"] == 1000 and report["dropped_empty"]["count"] == 0


def test_the_preflight_request_carries_the_objective():
    from tunedeck.data.preflight_request import PreflightRequest

    request = PreflightRequest.from_spec_data({
        "objective": "dpo", "dataset": "builtin:arithmetic-preference", "max_steps": 3,
        "columns": {"chosen": "good", "rejected": "bad"}, "dpo": {"beta": 0.2}})
    spec = request.to_spec()
    assert spec.objective == "dpo" and spec.columns.chosen == "good"
    assert PreflightRequest.from_spec_data({}).to_spec().objective == "sft"
