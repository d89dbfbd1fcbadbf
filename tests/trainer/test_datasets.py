import json

import pytest

from trainer.data.builtin_dataset import ARITHMETIC_SIZE, arithmetic_pairs
from trainer.token_loss import IGNORE_INDEX
from tunedeck.data.records import Example
from trainer.data.datasets import (collate, load_examples, micro_batches, rank_shard_order,
                                   render_prompt, tokenize_examples)
from tests.trainer.tokenizing import tokenize_example


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def test_alpaca_records_join_instruction_and_input(tmp_path):
    path = write_jsonl(tmp_path / "alpaca.jsonl", [
        {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
        {"instruction": "Say hello.", "input": "", "output": "hello"},
    ])
    first, second = load_examples(str(path))
    assert first.prompt_messages == ({"role": "user", "content": "Add the numbers.\n\n2 and 3"},)
    assert first.response == "5"
    assert second.prompt_messages[0]["content"] == "Say hello."


def test_prompt_response_records_in_a_json_list(tmp_path):
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps([{"prompt": "What is 1 + 1?", "response": "2"}]), encoding="utf-8")
    assert load_examples(str(path)) == [
        Example(prompt_messages=({"role": "user", "content": "What is 1 + 1?"},), response="2")]


def test_chat_records_train_on_the_last_assistant_turn(tmp_path):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Name a colour"},
        {"role": "assistant", "content": "red"},
    ]
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": messages}])
    [example] = load_examples(str(path))
    assert example.response == "red"
    assert [m["content"] for m in example.prompt_messages] == ["Be brief.", "Hi", "Hello", "Name a colour"]


def test_records_without_known_columns_name_the_path_and_the_expected_columns(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"foo": 1}])
    with pytest.raises(ValueError) as error:
        load_examples(str(path))
    assert str(error.value) == (
        f"dataset {path}: record 1 has keys ['foo']; "
        "expected instruction/output, prompt/response or messages")


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nowhere" / "data.jsonl"
    with pytest.raises(FileNotFoundError, match=str(path)):
        load_examples(str(path))


def test_broken_json_line_names_the_path_and_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"prompt": "a", "response": "b"}\n{not json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"dataset {path}: line 2 is not valid JSON"):
        load_examples(str(path))


def test_chat_record_without_an_assistant_turn_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "Hi"}]}])
    with pytest.raises(ValueError, match="record 1 messages have no assistant turn"):
        load_examples(str(path))


def test_unknown_builtin_dataset_lists_the_known_ones():
    with pytest.raises(ValueError, match="arithmetic"):
        load_examples("builtin:poetry")


def test_arithmetic_is_deterministic_and_correct():
    pairs = arithmetic_pairs()
    assert len(pairs) == ARITHMETIC_SIZE
    assert pairs == arithmetic_pairs()
    for prompt, response in pairs[:50]:
        expression = prompt.removeprefix("What is ").removesuffix("?")
        assert eval(expression) == int(response)  # noqa: S307 - our own generated text


def test_labels_cover_only_the_response_and_its_end_token(builtin_tokenizer):
    """The built-in template closes every turn with end-of-sequence and a newline."""
    example = Example(prompt_messages=({"role": "user", "content": "What is 12 + 7?"},), response="19")
    tokenized = tokenize_example(builtin_tokenizer, example, seq_len=256)
    prompt_text = render_prompt(builtin_tokenizer, example.prompt_messages)
    # The built-in template leaves beginning-of-sequence out; the training template writes it.
    assert prompt_text.startswith(builtin_tokenizer.bos_token)
    prompt_length = len(builtin_tokenizer(prompt_text, add_special_tokens=False).input_ids)
    assert tokenized.input_ids[0] == builtin_tokenizer.bos_token_id
    assert tokenized.labels[:prompt_length] == [IGNORE_INDEX] * prompt_length
    assert tokenized.labels[prompt_length:] == tokenized.input_ids[prompt_length:]
    answer = tokenized.labels[prompt_length:]
    assert builtin_tokenizer.eos_token_id in answer
    assert builtin_tokenizer.decode(answer) == f"19{builtin_tokenizer.eos_token}\n"


def test_without_a_chat_template_the_answer_ends_with_end_of_sequence(builtin_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(builtin_model_dir)
    tokenizer.chat_template = None
    example = Example(prompt_messages=({"role": "user", "content": "What is 12 + 7?"},), response="19")
    tokenized = tokenize_example(tokenizer, example, seq_len=256)
    prompt_text = render_prompt(tokenizer, example.prompt_messages)
    assert prompt_text.startswith("<s>### Instruction:\nWhat is 12 + 7?")
    answer = [label for label in tokenized.labels if label != IGNORE_INDEX]
    assert answer == tokenized.input_ids[-len(answer):]
    assert answer[-1] == tokenizer.eos_token_id and tokenizer.decode(answer[:-1]) == "19"


def test_the_loss_ignores_the_prompt(builtin_tokenizer, builtin_model_dir):
    """Same answer, different question: only the answer positions enter the loss."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(builtin_model_dir).eval()
    example = Example(prompt_messages=({"role": "user", "content": "What is 1 + 2?"},), response="3")
    batch = collate([tokenize_example(builtin_tokenizer, example, seq_len=64)], builtin_tokenizer.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"]).logits
        reported = model(**batch).loss
    answer = batch["labels"][0, 1:] != IGNORE_INDEX
    manual = torch.nn.functional.cross_entropy(logits[0, :-1][answer], batch["labels"][0, 1:][answer])
    assert torch.allclose(reported, manual, atol=1e-5)


def test_truncation_to_seq_len_and_dropping_examples_without_answer(builtin_tokenizer):
    long_prompt = Example(prompt_messages=({"role": "user", "content": "word " * 200},), response="ok")
    short = Example(prompt_messages=({"role": "user", "content": "Hi"},), response="hello")
    kept = tokenize_examples(builtin_tokenizer, [long_prompt, short], seq_len=16, source="test")
    assert len(kept) == 1 and len(kept[0].input_ids) <= 16
    with pytest.raises(ValueError, match="seq_len=16"):
        tokenize_examples(builtin_tokenizer, [long_prompt], seq_len=16, source="test")


def test_collate_pads_to_the_longest_with_masked_labels(builtin_tokenizer):
    examples = [Example(prompt_messages=({"role": "user", "content": text},), response="7")
                for text in ("Hi", "What is a long question here?")]
    items = [tokenize_example(builtin_tokenizer, example, seq_len=64) for example in examples]
    batch = collate(items, pad_token_id=builtin_tokenizer.pad_token_id)
    short_length, long_length = (len(item.input_ids) for item in items)
    assert batch["input_ids"].shape == (2, long_length)
    assert batch["attention_mask"][0].tolist() == [1] * short_length + [0] * (long_length - short_length)
    assert batch["labels"][0, short_length:].tolist() == [IGNORE_INDEX] * (long_length - short_length)
    assert batch["input_ids"][0, short_length:].tolist() == [builtin_tokenizer.pad_token_id] * (long_length - short_length)


def test_ranks_get_disjoint_equal_shards_of_one_seeded_order():
    shards = [rank_shard_order(103, seed=5, epoch=0, rank=rank, world_size=4) for rank in range(4)]
    assert {len(shard) for shard in shards} == {25}
    flat = [index for shard in shards for index in shard]
    assert len(set(flat)) == len(flat)
    assert shards[1] == rank_shard_order(103, seed=5, epoch=0, rank=1, world_size=4)
    assert shards[1] != rank_shard_order(103, seed=5, epoch=1, rank=1, world_size=4)


def test_micro_batches_continue_past_one_epoch(builtin_tokenizer):
    examples = [Example(prompt_messages=({"role": "user", "content": f"n{i}"},), response=str(i))
                for i in range(10)]
    tokenized = [tokenize_example(builtin_tokenizer, example, seq_len=32) for example in examples]
    batches = micro_batches(tokenized, micro_batch_size=2, pad_token_id=builtin_tokenizer.pad_token_id,
                            seed=0, rank=0, world_size=2)
    first = next(batches)
    assert first.token_count == int(first.inputs["attention_mask"].sum())
    shapes = [next(batches).inputs["input_ids"].shape[0] for _ in range(7)]  # 2 per epoch on this rank
    assert shapes == [2] * 7


CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture
def chatml_tokenizer(builtin_model_dir):
    """The built-in tokenizer with ChatML's turn tokens and template (a fresh copy: the
    session's tokenizer stays as it is)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(builtin_model_dir)
    tokenizer.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def test_chatml_labels_are_the_response_and_its_end_of_turn(chatml_tokenizer):
    example = Example(prompt_messages=({"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": "Hi"},
                                       {"role": "assistant", "content": "Hello"},
                                       {"role": "user", "content": "Name a colour"}),
                      response="red")
    tokenized = tokenize_example(chatml_tokenizer, example, seq_len=256)
    im_end = chatml_tokenizer.convert_tokens_to_ids("<|im_end|>")
    answer_start = next(i for i, label in enumerate(tokenized.labels) if label != IGNORE_INDEX)
    answer = tokenized.labels[answer_start:]

    assert answer == tokenized.input_ids[answer_start:]
    assert chatml_tokenizer.decode(answer) == "red<|im_end|>\n"
    assert im_end in answer
    # Nothing of the prompt is learned: not the earlier assistant turn, its end, or the
    # generation prompt that opens this one.
    prompt_text = chatml_tokenizer.decode(tokenized.input_ids[:answer_start])
    assert prompt_text.endswith("<|im_start|>assistant\n") and "Hello<|im_end|>" in prompt_text
    assert tokenized.input_ids[:answer_start].count(im_end) == len(example.prompt_messages)
    assert tokenized.input_ids[0] == chatml_tokenizer.bos_token_id


def test_a_template_that_does_not_extend_the_prompt_is_refused_naming_the_dataset(chatml_tokenizer):
    chatml_tokenizer.chat_template = (
        "{% for message in messages %}{% if message['role'] == 'assistant' %}A: {{ message['content'] }}"
        "{% else %}<|user|>\n{{ message['content'] }}\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    example = Example(prompt_messages=({"role": "user", "content": "Hi"},), response="hello")
    with pytest.raises(ValueError, match=r"^dataset /data/chat\.jsonl: the tokenizer's chat template"):
        tokenize_examples(chatml_tokenizer, [example], seq_len=64, source="dataset /data/chat.jsonl")


def test_eval_dataset_errors_name_the_eval_dataset_field(tmp_path):
    missing = tmp_path / "eval.jsonl"
    with pytest.raises(FileNotFoundError, match=rf"^eval_dataset {missing}: no such file"):
        load_examples(str(missing), field="eval_dataset")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"foo": 1}])
    with pytest.raises(ValueError, match=rf"^eval_dataset {bad}: record 1 has keys"):
        load_examples(str(bad), field="eval_dataset")
