"""A real 2-rank run on a Hugging Face dataset id that only the hub cache holds
(HF_HUB_OFFLINE=1), its columns named otherwise (`columns`), with a .csv eval set."""
import csv
from statistics import mean

import pytest

from tests.hub_cache import add_hub_dataset, offline_hub  # noqa: F401
from trainer.data.builtin_dataset import arithmetic_pairs

pytestmark = pytest.mark.torchrun

TRAIN_EXAMPLES = 1800
STEPS = 36  # conftest's BASE_SPEC
PERSONA = "Answer with digits only."


def test_a_run_trains_on_a_cached_dataset_id_with_mapped_columns(offline_hub, tmp_path,
                                                                 run_trainer):
    pairs = arithmetic_pairs()
    train, held_out = pairs[:TRAIN_EXAMPLES], pairs[TRAIN_EXAMPLES:]
    add_hub_dataset(offline_hub, "tunedeck-test/arithmetic-qa", {
        "question": [prompt for prompt, _ in train], "answer": [answer for _, answer in train],
        "persona": [PERSONA] * len(train)})
    eval_file = tmp_path / "eval.csv"
    with eval_file.open("w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows([("question", "answer", "persona"),
                                    *((prompt, answer, PERSONA) for prompt, answer in held_out)])

    result = run_trainer(dataset="tunedeck-test/arithmetic-qa", eval_dataset=str(eval_file),
                         columns={"prompt": "question", "response": "answer", "system": "persona"},
                         eval_every_steps=STEPS // 2)
    assert result.returncode == 0, result.output
    print(f"run on a cached dataset id with mapped columns: {result.seconds:.1f} s")

    started = next(event["message"] for event in result.events_of_kind(0, "notice")
                   if event["message"].startswith("training started"))
    assert f"{TRAIN_EXAMPLES} examples" in started, started
    losses = [event["loss"] for event in result.events_of_kind(0, "step")]
    assert len(losses) == STEPS and mean(losses[-5:]) < mean(losses[:5]) - 0.3, losses
    evaluations = result.events_of_kind(0, "eval")
    assert [event["step"] for event in evaluations] == [STEPS // 2, STEPS]
    assert evaluations[-1]["eval_loss"] < evaluations[0]["eval_loss"], evaluations
