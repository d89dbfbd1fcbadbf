"""The eval loss's sum: taken over answer tokens, it is the model's own mean loss."""
import torch

from trainer.token_loss import IGNORE_INDEX
from tunedeck.data.records import Example
from trainer.data.datasets import collate
from tests.trainer.tokenizing import tokenize_example
from trainer.token_loss import summed_token_loss


def test_summed_token_loss_over_tokens_is_the_models_own_mean_loss(builtin_tokenizer, builtin_model_dir):
    from trainer.model.model_source import load_base_model

    model = load_base_model(str(builtin_model_dir)).eval()
    examples = [Example(({"role": "user", "content": q},), a)
                for q, a in [("What is 1 + 2?", "3"), ("Say hello to the world.", "hello world")]]
    batch = collate([tokenize_example(builtin_tokenizer, e, seq_len=64) for e in examples],
                    builtin_tokenizer.pad_token_id)
    with torch.no_grad():
        output = model(**batch)
    loss_sum, tokens = summed_token_loss(output.logits, batch["labels"])
    assert tokens == (batch["labels"][:, 1:] != IGNORE_INDEX).sum()
    assert torch.allclose(loss_sum / tokens, output.loss, atol=1e-5)
