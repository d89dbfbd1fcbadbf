"""`--set KEY=VALUE` on a spec file's mapping: values read as YAML, sections by dots, and
the key named when an assignment cannot be made."""
import pytest

from tunedeck.spec.text import parse_spec_text
from tunedeck.spec.overrides import with_assignments


def test_assignments_set_fields_and_section_fields_with_yaml_values():
    data = {"max_steps": 3, "lora": {"r": 4, "alpha": 8}}
    changed = with_assignments(data, ["max_steps=50", "lora.r=16", "name=my run",
                                      "lora.target_modules=[q_proj, v_proj]", "fsdp.cpu_offload=true",
                                      "learning_rate=3e-4", "dataset_config=2024"])
    assert changed == {"max_steps": 50, "lora": {"r": 16, "alpha": 8,
                                                 "target_modules": ["q_proj", "v_proj"]},
                       "name": "my run", "fsdp": {"cpu_offload": True}, "learning_rate": 3e-4,
                       "dataset_config": 2024}
    assert data == {"max_steps": 3, "lora": {"r": 4, "alpha": 8}}  # the file's own, unchanged
    assert with_assignments({}, ["name=a: b"]) == {"name": "a: b"}  # not YAML: the text


@pytest.mark.parametrize("assignment, words", [
    ("max_steps", "--set max_steps: expected KEY=VALUE"),
    ("=3", "--set =3: expected KEY=VALUE"),
    ("lora..r=3", "--set lora..r=3: expected KEY=VALUE"),
    ("max_steps.x=1", "--set max_steps.x=1: max_steps is not a section"),
])
def test_an_assignment_that_cannot_be_made_names_itself(assignment, words):
    with pytest.raises(ValueError, match="^" + words.replace(".", r"\.").replace("[", r"\[")):
        with_assignments({"max_steps": 3}, [assignment])


def test_assigned_values_are_validated_by_the_spec_as_the_files_are():
    spec = parse_spec_text("max_steps: 3\n", assignments=["lora.r=8", "max_steps=9"])
    assert (spec.lora.r, spec.max_steps) == (8, 9)
    with pytest.raises(ValueError, match="dataset_config"):  # a YAML int where text is wanted
        parse_spec_text("max_steps: 3\n", assignments=["dataset_config=2024"])
