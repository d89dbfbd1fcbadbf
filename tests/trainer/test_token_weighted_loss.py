"""The step's loss and gradient are means over answer tokens (trainer/token_loss.py), so one
global batch trains the same model however it is split into micro-batches, accumulation
steps and ranks. Real torchrun runs in fp32 with no dropout, on answers of very different
lengths (1 word and 10-14 words, alternating): under a mean of micro-batch means, 4 x 1
against 1 x 4 differed by 1.7% at step 1 and up to 10% over the curve."""
import pytest

from harness.uneven_answers import write_uneven_answers
from tests.trainer.conftest import launch_trainer, write_run

pytestmark = pytest.mark.torchrun

STEPS = 30
STEP_ONE_TOLERANCE = 1e-4
CURVE_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def split_run(tmp_path_factory, tunedeck_home, builtin_model_dir):
    """split_run(backend, ranks, micro_batch_size, grad_accum, **spec_options) -> rank 0's
    step losses, each launched once per module."""
    dataset = write_uneven_answers(tmp_path_factory.mktemp("data") / "uneven.jsonl")
    losses = {}

    def run(backend: str, ranks: int, micro_batch_size: int, grad_accum: int,
            **options) -> list[float]:
        key = (backend, ranks, micro_batch_size, grad_accum,
               *(f"{name}={value}" for name, value in sorted(options.items())))
        if key not in losses:
            folder = write_run(tmp_path_factory.mktemp("-".join(map(str, key))) / "run",
                               **options,
                               dataset=str(dataset), backend=backend, num_gpus=ranks,
                               micro_batch_size=micro_batch_size, grad_accum=grad_accum,
                               max_steps=STEPS, precision="fp32", lr_schedule="constant",
                               lora={"dropout": 0.0})
            result = launch_trainer(folder, tunedeck_home, ranks=ranks)
            assert result.returncode == 0, result.output
            losses[key] = [event["loss"] for event in result.events_of_kind(0, "step")]
            run.notices[key] = [event["message"] for event in result.events_of_kind(0, "notice")]
            assert len(losses[key]) == STEPS
        return losses[key]

    run.notices = {}  # by the same key: rank 0's notices, which say how it trained
    return run


def relative_gaps(curve: list[float], reference: list[float]) -> list[float]:
    return [abs(a - b) / abs(b) for a, b in zip(curve, reference, strict=True)]


@pytest.mark.parametrize("micro_batch_size,grad_accum", [(2, 2), (1, 4)])
def test_accumulation_splits_train_the_same_curve_as_one_micro_batch(micro_batch_size, grad_accum,
                                                                     split_run):
    whole = split_run("zero2", 2, 4, 1)
    split = split_run("zero2", 2, micro_batch_size, grad_accum)
    gaps = relative_gaps(split, whole)
    assert gaps[0] < STEP_ONE_TOLERANCE, (split[0], whole[0])
    assert max(gaps) < CURVE_TOLERANCE, gaps
    assert whole[-1] < whole[0] - 0.5, whole  # it trained: the curve is not flat


def test_two_ranks_of_two_equal_one_rank_of_four(split_run):
    """The same 8 examples a step (1 rank x micro-batch 4 x 2 against 2 ranks x 2 x 2: the
    ranks deal one shuffled order round-robin, so every step holds the same examples)."""
    one_rank = split_run("zero2", 1, 4, 2)
    two_ranks = split_run("zero2", 2, 2, 2)
    gaps = relative_gaps(two_ranks, one_rank)
    assert gaps[0] < STEP_ONE_TOLERANCE and max(gaps) < CURVE_TOLERANCE, gaps


def test_zero2_and_fsdp_stay_equal(split_run):
    zero2 = split_run("zero2", 2, 4, 1)
    fsdp = split_run("fsdp", 2, 4, 1)
    assert max(relative_gaps(fsdp, zero2)) < 1e-6, (zero2, fsdp)


@pytest.mark.parametrize("backend", ["zero2", "fsdp"])
def test_padding_free_rows_and_the_fused_optimizer_train_the_same_curve(backend, split_run):
    """The speed options that run on CPU ranks change how the step is computed, never what
    it computes: one padding-free row a micro-batch (the block-diagonal mask from the
    restarting positions) and torch's fused AdamW (through DeepSpeed's torch_adam under
    ZeRO-2) follow the padded, unfused curve."""
    plain = split_run(backend, 2, 4, 1)
    fast = split_run(backend, 2, 4, 1, padding_free=True, fused_optimizer=True)
    gaps = relative_gaps(fast, plain)
    assert gaps[0] < STEP_ONE_TOLERANCE and max(gaps) < CURVE_TOLERANCE, gaps
    # It did train padding-free (that each backend steps the fused AdamW is
    # test_speed_options.py's probe).
    (started,) = [message for message in split_run.notices[
        (backend, 2, 4, 1, "fused_optimizer=True", "padding_free=True")]
        if message.startswith("training started")]
    assert "each micro-batch one padding-free row" in started, started


def test_packed_rows_padding_free_train_as_packed_rows_padded(split_run):
    packed = split_run("fsdp", 2, 2, 1, packing=True)
    padding_free = split_run("fsdp", 2, 2, 1, packing=True, padding_free=True)
    gaps = relative_gaps(padding_free, packed)
    assert gaps[0] < STEP_ONE_TOLERANCE and max(gaps) < CURVE_TOLERANCE, gaps
