"""The rule for a spec's model, dataset and eval_dataset paths, on real files, symlinks and
device files."""
import os

import pytest

from tunedeck.data.input_paths import reference_problem, spec_path_problems
from tunedeck.spec.job_spec import JobSpec


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "allowed"
    root.mkdir()
    return root


def dataset_file(folder, name="train.jsonl"):
    path = folder / name
    path.write_text('{"prompt": "1+1?", "response": "2"}\n')
    return path


def test_builtins_and_hub_ids_pass(root):
    for field, reference in [("model", "builtin:tiny-llama"), ("dataset", "builtin:arithmetic"),
                             ("model", "meta-llama/Llama-2-13b-hf"), ("model", "gpt2"),
                             ("model", "Qwen/Qwen2.5-0.5B"), ("dataset", "tatsu-lab/alpaca")]:
        assert reference_problem(field, reference, [root]) is None, reference


def test_a_file_and_a_model_folder_inside_the_root_pass(root):
    model = root / "models" / "llama"
    model.mkdir(parents=True)
    assert reference_problem("dataset", str(dataset_file(root)), [root]) is None
    assert reference_problem("model", str(model), [root]) is None


def test_a_missing_file_inside_the_root_is_left_to_the_worker(root):
    assert reference_problem("dataset", str(root / "later.jsonl"), [root]) is None


def test_etc_passwd_as_a_dataset_is_refused_naming_the_field_the_path_and_the_roots(root):
    problem = reference_problem("dataset", "/etc/passwd", [root])
    assert problem.startswith("dataset /etc/passwd: outside the allowed folders")
    assert str(root) in problem and "TUNEDECK_ALLOWED_ROOTS" in problem


def test_dotdot_is_refused_even_when_it_lands_inside_the_root(root):
    dataset_file(root)
    inside = f"{root}/sub/../train.jsonl"
    (root / "sub").mkdir()
    problem = reference_problem("dataset", inside, [root])
    assert problem.startswith(f"dataset {inside}: '..' is not allowed")
    escape = f"{root}/../../etc/passwd"
    assert "'..' is not allowed" in reference_problem("eval_dataset", escape, [root])


def test_a_symlink_inside_the_root_pointing_out_is_refused(root, tmp_path):
    outside = dataset_file(tmp_path, "secret.jsonl")
    link = root / "innocent.jsonl"
    link.symlink_to(outside)
    problem = reference_problem("dataset", str(link), [root])
    assert problem.startswith(f"dataset {link} (resolves to {outside}): outside the allowed folders")


def test_a_symlinked_root_is_compared_resolved(tmp_path):
    real_root = tmp_path / "real"
    real_root.mkdir()
    linked_root = tmp_path / "linked"
    linked_root.symlink_to(real_root)
    data = dataset_file(real_root)
    assert reference_problem("dataset", str(linked_root / "train.jsonl"), [real_root]) is None
    assert reference_problem("dataset", str(data), [linked_root]) is None


def test_a_sibling_folder_sharing_the_roots_prefix_is_outside(root, tmp_path):
    sibling = tmp_path / "allowed-not"
    sibling.mkdir()
    assert "outside the allowed folders" in reference_problem(
        "dataset", str(dataset_file(sibling)), [root])


def test_dev_zero_is_refused_outside_and_inside_the_root(root):
    assert "outside the allowed folders" in reference_problem("dataset", "/dev/zero", [root])
    assert "not a regular file" in reference_problem("dataset", "/dev/zero", [root, "/dev"])


def test_a_fifo_inside_the_root_is_refused(root):
    fifo = root / "data.jsonl"
    os.mkfifo(fifo)
    assert reference_problem("dataset", str(fifo), [root]) == (
        f"dataset {fifo}: not a regular file (a device, FIFO or socket); "
        "expected a dataset file or folder")


def test_a_relative_path_is_refused_asking_for_an_absolute_one(root):
    for reference in ("data/train.jsonl", "./train.jsonl", "../train.jsonl", "~/train.jsonl",
                      "train.jsonl"):
        problem = reference_problem("dataset", reference, [root])
        assert problem.startswith(f"dataset {reference}: not an absolute path; give an absolute "
                                  "path under an allowed folder"), reference
        assert str(root) in problem


def test_a_model_folder_outside_the_roots_is_refused(root, tmp_path):
    model = tmp_path / "elsewhere" / "model"
    model.mkdir(parents=True)
    problem = reference_problem("model", str(model), [root])
    assert problem.startswith(f"model {model}: outside the allowed folders")


def test_a_model_must_be_a_folder_and_a_dataset_folder_may_not_link_outside(root, tmp_path):
    data = dataset_file(root)
    assert reference_problem("model", str(data), [root]).startswith(f"model {data}: not a folder")
    # A dataset may be a folder (save_to_disk's, or data files), read whole by the worker ...
    assert reference_problem("dataset", str(root), [root]) is None
    # ... so a file in it that links outside the roots is refused, like a path outside them.
    outside = dataset_file(tmp_path, "secret.jsonl")
    (root / "data").mkdir()
    (root / "data" / "train.jsonl").symlink_to(outside)
    assert reference_problem("dataset", str(root), [root]).startswith(
        f"dataset {root}: {root / 'data' / 'train.jsonl'} links outside the allowed folders")


def test_no_roots_means_no_local_path(root):
    problem = reference_problem("dataset", str(dataset_file(root)), [])
    assert "Allowed folders: none" in problem


def test_a_reference_neither_id_nor_path_is_refused(root):
    problem = reference_problem("model", "a/b/c", [root])
    assert problem.startswith("model a/b/c: neither a Hugging Face id")


def test_spec_path_problems_names_each_field(root):
    spec = JobSpec(max_steps=1, model="/etc", dataset="/etc/passwd",
                   eval_dataset=str(dataset_file(root)))
    assert [field for field, _ in spec_path_problems(spec, [root])] == ["model", "dataset"]
