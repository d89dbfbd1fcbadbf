"""trainer/objectives/grpo.py's pure parts: where a completion ends, how a round's rows are
laid out for the loss forward, and a prompt's cut to the room seq_len leaves."""
import torch

from trainer.objectives.grpo import (COMPLETION_IDS, COMPLETION_MASK, Round, completion_masks,
                                     left_padded, round_seed, selected_logps, tokenize_prompts,
                                     trimmed_inputs)
from tunedeck.data.prompt_records import PromptRecord

STOP = 2


def test_a_completion_ends_at_its_first_stop_token_or_is_truncated():
    ids = torch.tensor([[5, 6, STOP, 7], [5, STOP, STOP, 0], [5, 6, 7, 8]])
    mask, truncated = completion_masks(ids, [STOP])
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert truncated.tolist() == [False, False, True]


def test_prompts_are_left_padded_so_every_row_continues_at_its_end():
    ids, mask = left_padded([[1, 2, 3], [4]], pad_token_id=0)
    assert ids.tolist() == [[1, 2, 3], [0, 0, 4]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_a_micro_batch_drops_padding_none_of_its_rows_needs_and_counts_real_positions():
    prompt_ids, prompt_mask = left_padded([[1, 2, 3], [4, 5], [6]], pad_token_id=0)
    completion_ids = torch.tensor([[7, STOP, 0, 0], [8, 9, STOP, 0], [7, 7, 7, 7]])
    completion_mask, _ = completion_masks(completion_ids, [STOP])
    sampled = Round(prompt_ids, prompt_mask, completion_ids, completion_mask,
                    torch.tensor([0.5, -0.5, 1.0]), report=None, prompts=[], completions=[],
                    rewards=[])
    inputs = trimmed_inputs(sampled, slice(1, 3))  # rows [4, 5] and [6]
    assert inputs["input_ids"].tolist() == [[4, 5, 8, 9, STOP, 0], [0, 6, 7, 7, 7, 7]]
    assert inputs["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5], [0, 0, 1, 2, 3, 4]]
    assert inputs[COMPLETION_IDS].shape == (2, 4)
    assert inputs[COMPLETION_MASK].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    narrow = trimmed_inputs(sampled, slice(0, 1))  # a completion of 2 tokens: 2 columns kept
    assert narrow[COMPLETION_IDS].tolist() == [[7, STOP]]


def test_selected_logps_equal_the_log_softmax_at_the_sampled_tokens():
    logits = torch.randn(2, 3, 11)
    tokens = torch.randint(0, 11, (2, 3))
    expected = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(selected_logps(logits, tokens), expected, atol=1e-6)


def test_a_rounds_seed_depends_on_the_job_the_round_and_the_rank():
    seeds = {round_seed(42, round_index, rank) for round_index in range(3) for rank in range(2)}
    assert len(seeds) == 6 and round_seed(42, 1, 0) == round_seed(42, 1, 0)


def test_a_long_prompt_loses_its_start_and_keeps_the_turn_it_is_answered_in(builtin_tokenizer):
    records = [PromptRecord(({"role": "user", "content": "word " * 200 + "What is 1 + 1?"},), {})]
    (whole,) = tokenize_prompts(builtin_tokenizer, records, room=10_000)
    (row,) = tokenize_prompts(builtin_tokenizer, records, room=24)
    assert row.input_ids == whole.input_ids[-24:]
    assert "What is 1 + 1?" in builtin_tokenizer.decode(row.input_ids)


def test_check_data_reports_prompt_lengths_against_the_room_left_for_a_completion(
        builtin_model_dir, builtin_tokenizer):
    from tunedeck.data.preflight_text import summary_lines
    from tunedeck.spec.job_spec import JobSpec

    from trainer.data.dataset_preflight import preflight_report

    spec = JobSpec.model_validate({"objective": "grpo", "model": str(builtin_model_dir),
                                   "dataset": "builtin:arithmetic-rl", "max_steps": 1,
                                   "micro_batch_size": 8, "seq_len": 268})
    report = preflight_report(spec, tokenizer=builtin_tokenizer)
    assert report["objective"] == "grpo" and report["records"] == 1000
    assert report["prompt_room"] == 12 and report["reward_columns"] == ["answer"]
    longest = report["lengths"]["max"]
    assert report["over_seq_len"]["count"] > 0 and report["warnings"]
    assert f"seq_len {longest + 256} keeps them all whole" in report["warnings"][0]
    lines = summary_lines(report)
    assert lines[0] == "1000 prompts; all tokenized"
    assert "room for a prompt: 12 tokens (seq_len 268 less max_completion_length 256)" in lines
    roomy = preflight_report(spec.model_copy(update={"seq_len": 512}), tokenizer=builtin_tokenizer)
    assert roomy["over_seq_len"]["count"] == 0 and not roomy["warnings"][:1] == report["warnings"][:1]


def test_sampling_ignores_a_checkpoints_own_generation_settings(builtin_model_dir,
                                                                 builtin_tokenizer):
    """A model whose generation_config narrows sampling (top_k 1: greedy, a repetition
    penalty) still samples its whole distribution under GRPO's settings."""
    from transformers import AutoModelForCausalLM

    from trainer.objectives.grpo import GrpoObjective
    from tunedeck.spec.job_spec import JobSpec

    model = AutoModelForCausalLM.from_pretrained(builtin_model_dir)
    model.generation_config.top_k, model.generation_config.repetition_penalty = 1, 5.0
    spec = JobSpec.model_validate({"objective": "grpo", "dataset": "builtin:arithmetic-rl",
                                   "max_steps": 1, "micro_batch_size": 8, "seq_len": 64,
                                   "grpo": {"max_completion_length": 6}})
    objective = GrpoObjective(spec, tokenizer=builtin_tokenizer, adapter=False)
    config = objective._generation_config(builtin_tokenizer.pad_token_id)
    ids = torch.tensor([[5, 6, 7]] * 8)
    torch.manual_seed(0)
    samples = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             generation_config=config)
    assert len({tuple(row) for row in samples[:, 3:].tolist()}) > 1  # not greedy
    assert config.top_k == 0 and config.repetition_penalty == 1.0
