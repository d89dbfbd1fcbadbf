import math

import pytest

from trainer.train import stop_on_non_finite_loss


def test_a_finite_loss_passes():
    stop_on_non_finite_loss(2.5, step=3, precision="bf16")


@pytest.mark.parametrize("loss", [math.nan, math.inf, -math.inf])
def test_a_non_finite_loss_stops_the_run_with_its_step_and_advice(loss):
    with pytest.raises(FloatingPointError, match=f"loss became {loss} at step 7; lower the learning rate$"):
        stop_on_non_finite_loss(loss, step=7, precision="bf16")


def test_fp16_advice_names_bf16():
    with pytest.raises(FloatingPointError, match="use bf16"):
        stop_on_non_finite_loss(math.nan, step=1, precision="fp16")
