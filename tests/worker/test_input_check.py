import json

from tests.hub_cache import add_hub_dataset, offline_hub  # noqa: F401
from tunedeck.spec.job_spec import JobSpec
from worker.input_check import find_input_problems


def spec(**fields) -> JobSpec:
    return JobSpec(max_steps=1, **fields)


def test_builtins_and_hub_ids_pass():
    assert find_input_problems(spec()) == []
    assert find_input_problems(spec(model="meta-llama/Meta-Llama-3-8B")) == []


def test_missing_model_folder_names_the_path(tmp_path):
    missing = tmp_path / "no-model"
    assert find_input_problems(spec(model=str(missing))) == [
        f"model {missing}: no such folder; expected a Hugging Face model folder"]


def test_model_folder_without_config(tmp_path):
    (problem,) = find_input_problems(spec(model=str(tmp_path)))
    assert str(tmp_path) in problem and "config.json" in problem


def test_missing_dataset_file_names_the_path(tmp_path):
    missing = tmp_path / "train.jsonl"
    (problem,) = find_input_problems(spec(dataset=str(missing)))
    assert problem.startswith(f"dataset {missing}: no such file")


def test_unknown_builtin_and_unsupported_format(tmp_path):
    text = tmp_path / "train.txt"
    text.write_text("a,b\n")
    problems = find_input_problems(spec(model="builtin:gpt-5", dataset=str(text)))
    assert "unknown built-in model" in problems[0]
    assert problems[1] == (f"dataset {text}: unsupported file type '.txt'; expected a .jsonl, "
                           ".json, .jsonl.gz, .parquet or .csv file, a dataset folder, or a "
                           "Hugging Face dataset id (org/name)")


def test_wrong_columns_name_the_file_the_record_and_the_expected_shapes(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n"
                    + json.dumps({"question": "a", "answer": "b"}) + "\n")
    assert find_input_problems(spec(dataset=str(data))) == [
        f"dataset {data}: record 2 has keys ['answer', 'question']; "
        "expected instruction/output, prompt/response or messages"]


def test_an_empty_directory_is_not_a_dataset(tmp_path):
    (problem,) = find_input_problems(spec(dataset=str(tmp_path)))
    assert problem.startswith(f"dataset {tmp_path}: an empty folder; expected a folder written "
                              "by save_to_disk")


def test_existing_jsonl_passes(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n")
    assert find_input_problems(spec(dataset=str(data))) == []


def test_eval_dataset_is_checked_like_the_dataset_naming_its_field(tmp_path):
    missing = tmp_path / "eval.jsonl"
    assert find_input_problems(spec(eval_dataset=str(missing))) == [
        f"eval_dataset {missing}: no such file; expected a local .jsonl, .json, .jsonl.gz file"]
    wrong = tmp_path / "eval-wrong.jsonl"
    wrong.write_text(json.dumps({"question": "a"}) + "\n")
    assert find_input_problems(spec(eval_dataset=str(wrong))) == [
        f"eval_dataset {wrong}: record 1 has keys ['question']; "
        "expected instruction/output, prompt/response or messages"]
    assert "eval_dataset builtin:poetry: unknown built-in dataset" in find_input_problems(
        spec(eval_dataset="builtin:poetry"))[0]
    good = tmp_path / "eval.json"
    good.write_text(json.dumps([{"prompt": "a", "response": "b"}]))
    assert find_input_problems(spec(eval_dataset=str(good))) == []


def test_an_eval_split_must_leave_a_micro_batch_per_rank_and_hold_out_one(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"q{i}", "response": "a"}) + "\n" for i in range(12)))
    assert find_input_problems(spec(dataset=str(data), eval_split=0.25, micro_batch_size=4,
                                    num_gpus=2)) == []
    assert find_input_problems(spec(dataset=str(data), eval_split=0.5, micro_batch_size=4,
                                    num_gpus=2)) == [
        f"eval_split 0.5: leaves 6 of 12 examples to train on; need at least "
        f"micro_batch_size x ranks = 8 (dataset {data})"]
    assert find_input_problems(spec(dataset=str(data), eval_split=0.01)) == [
        f"eval_split 0.01: holds out none of the 12 examples; raise eval_split or set "
        f"eval_dataset (dataset {data})"]
    assert find_input_problems(spec(eval_split=0.2, micro_batch_size=4, num_gpus=8)) == []


def test_fp16_under_zero2_is_refused_on_a_host_without_cuda_only():
    (problem,) = find_input_problems(spec(backend="zero2", precision="fp16"), cuda_available=False)
    assert problem.startswith("precision fp16 under zero2 needs a CUDA GPU: DeepSpeed's CPU "
                              "accelerator has no fp16 support on this host")
    assert "use bf16 (or fp32) on CPU hosts, or backend fsdp" in problem
    assert find_input_problems(spec(backend="zero2", precision="fp16"), cuda_available=True) == []
    for other in (spec(backend="zero2", precision="bf16"), spec(backend="fsdp", precision="fp16")):
        assert find_input_problems(other, cuda_available=False) == []


def test_a_dataset_id_not_in_the_cache_offline_fails_naming_it_and_hf_hub_offline(offline_hub,
                                                                                   tmp_path):
    (problem,) = find_input_problems(spec(dataset="tunedeck-test/absent"),
                                     datasets_cache=tmp_path / "hf-datasets")
    assert problem.startswith("dataset tunedeck-test/absent: not in this host's Hugging Face cache")
    assert "HF_HUB_OFFLINE=1 forbids downloading it" in problem


def test_a_model_id_not_in_the_cache_offline_names_hf_hub_offline_and_how_to_fill_it(
        offline_hub):
    (problem,) = find_input_problems(spec(model="tunedeck-test/absent-model"),
                                     cuda_available=False)
    assert problem.startswith(f"model tunedeck-test/absent-model: not in this host's Hugging "
                              f"Face cache ({offline_hub}")
    assert "HF_HUB_OFFLINE=1 forbids downloading it" in problem
    assert "`hf download tunedeck-test/absent-model`" in problem and "HF_HOME" in problem


def test_a_cached_dataset_id_passes_offline_and_its_records_are_counted(offline_hub, tmp_path):
    add_hub_dataset(offline_hub, "tunedeck-test/qa", {"q": ["a"] * 12, "a": ["b"] * 12})
    cached = spec(dataset="tunedeck-test/qa", columns={"prompt": "q", "response": "a"})
    cache = tmp_path / "hf-datasets"
    assert find_input_problems(cached, datasets_cache=cache) == []
    split = cached.model_copy(update={"eval_split": 0.5, "num_gpus": 2})
    assert find_input_problems(split, datasets_cache=cache) == [
        "eval_split 0.5: leaves 6 of 12 examples to train on; need at least micro_batch_size x "
        "ranks = 8 (dataset tunedeck-test/qa)"]


def test_a_missing_column_fails_naming_it_and_the_columns(tmp_path):
    data = tmp_path / "train.csv"
    data.write_text("question,answer\nWhat is 1 + 1?,2\n")
    eval_data = tmp_path / "eval.csv"
    eval_data.write_text("question,reply\nWhat is 2 + 2?,4\n")
    problems = find_input_problems(
        spec(dataset=str(data), eval_dataset=str(eval_data),
             columns={"prompt": "question", "response": "answer"}),
        datasets_cache=tmp_path / "hf-datasets")
    assert problems == [f"eval_dataset {eval_data}: no column 'answer' (columns.response); its "
                        "columns are ['question', 'reply']"]


def test_gpu_speed_options_are_refused_on_a_host_without_cuda_before_any_gpu_is_taken():
    liger_and_flash = spec(kernels="liger", attention="flash")
    kernels, attention = find_input_problems(liger_and_flash, cuda_available=False)
    assert kernels.startswith("kernels liger: needs a CUDA GPU")
    assert kernels.endswith("set kernels to auto to train here")
    assert attention.startswith("attention flash: needs a CUDA GPU")
    assert attention.endswith("set attention to sdpa to train here")
    # Padding-free rows and the fused optimizer run on any host.
    assert find_input_problems(spec(padding_free=True, fused_optimizer=True, backend="fsdp"),
                               cuda_available=False) == []


def test_a_local_model_family_liger_does_not_patch_is_refused_by_name(tmp_path, monkeypatch):
    from trainer.speed import host_support, liger

    monkeypatch.setattr(host_support, "package_installed", lambda name: True)
    monkeypatch.setattr(liger, "liger_model_types", lambda: frozenset({"llama", "qwen2"}))
    folder = tmp_path / "neox"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt_neox"}))
    (problem,) = find_input_problems(spec(model=str(folder), kernels="liger"), cuda_available=True)
    assert problem == ("kernels liger: Liger Kernel has no kernels for model family 'gpt_neox' "
                       "(it patches llama, qwen2); set kernels to none")
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert find_input_problems(spec(model=str(folder), kernels="liger"), cuda_available=True) == []


# --- objective dpo: the data read as preference pairs ----------------------------------

def pairs_file(path, count: int = 1, **changes):
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "chosen": "good", "rejected": "bad",
                                        **changes}) + "\n" for i in range(count)))
    return path


def test_dpo_data_is_read_as_pairs_naming_a_missing_side_and_a_records_empty_side(tmp_path):
    good = pairs_file(tmp_path / "prefs.jsonl")
    assert find_input_problems(spec(objective="dpo", dataset=str(good))) == []
    sft_data = tmp_path / "sft.jsonl"
    sft_data.write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n")
    (problem,) = find_input_problems(spec(objective="dpo", dataset=str(sft_data)))
    assert problem.startswith(f"dataset {sft_data}: record 1 has no column 'chosen'; its columns "
                              "are ['prompt', 'response']")
    empty = pairs_file(tmp_path / "empty.jsonl", 3, rejected="")
    assert find_input_problems(spec(objective="dpo", dataset=str(good),
                                    eval_dataset=str(empty))) == [
        f"eval_dataset {empty}: record 1: rejected is empty"]
    # Pairs are not SFT examples.
    (problem,) = find_input_problems(spec(dataset=str(good)))
    assert problem.startswith(f"dataset {good}: record 1 has keys ['chosen', 'prompt', 'rejected']")


def test_dpo_csv_data_without_chosen_and_rejected_names_the_columns_it_has(tmp_path):
    data = tmp_path / "train.csv"
    data.write_text("question,answer\nWhat is 1 + 1?,2\n")
    (problem,) = find_input_problems(spec(objective="dpo", dataset=str(data)),
                                     datasets_cache=tmp_path / "hf-datasets")
    assert problem.startswith(f"dataset {data}: no columns 'chosen' (columns.chosen) and "
                              "'rejected' (columns.rejected); its columns are ['answer', 'question']")
    mapped = spec(objective="dpo", dataset=str(data),
                  columns={"prompt": "question", "chosen": "answer", "rejected": "answer"})
    assert find_input_problems(mapped, datasets_cache=tmp_path / "hf-datasets") == []


def test_each_built_in_dataset_passes_for_its_own_objective_only():
    assert find_input_problems(spec(objective="dpo", dataset="builtin:arithmetic-preference")) == []
    (problem,) = find_input_problems(spec(objective="dpo"))
    assert problem == ("dataset builtin:arithmetic: its records are supervised examples "
                       "(prompt/response), and objective dpo trains on preference pairs; use "
                       "builtin:arithmetic-preference")
    (problem,) = find_input_problems(spec(dataset="builtin:arithmetic-preference"))
    assert problem.endswith("objective sft trains on supervised examples; use builtin:arithmetic")


def test_a_dpo_eval_split_counts_pairs(tmp_path):
    data = pairs_file(tmp_path / "prefs.jsonl", 12)
    assert find_input_problems(spec(objective="dpo", dataset=str(data), eval_split=0.25,
                                    micro_batch_size=4, num_gpus=2)) == []
    assert find_input_problems(spec(objective="dpo", dataset=str(data), eval_split=0.5,
                                    micro_batch_size=4, num_gpus=2)) == [
        f"eval_split 0.5: leaves 6 of 12 pairs to train on; need at least "
        f"micro_batch_size x ranks = 8 (dataset {data})"]
    # builtin:arithmetic-preference's 1000 pairs: 100 held out, 900 left for 8 x 64.
    assert find_input_problems(spec(objective="dpo", dataset="builtin:arithmetic-preference",
                                    eval_split=0.1, micro_batch_size=64, num_gpus=8)) == []
    assert "leaves 900 of 1000 pairs" in find_input_problems(
        spec(objective="dpo", dataset="builtin:arithmetic-preference", eval_split=0.1,
             micro_batch_size=128, num_gpus=8))[0]
