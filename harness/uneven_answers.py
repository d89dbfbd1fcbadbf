"""A dataset of answers of very different lengths (1 word and 10-14 words, alternating): the
shape under which a mean of micro-batch means and a mean over answer tokens differ most."""
import json
import random

from trainer.model.builtin_model import _WORDS

EXAMPLES = 64  # a multiple of every micro-batch x ranks the loss tests use: no rank drops a row


def write_uneven_answers(path, *, count: int = EXAMPLES, seed: int = 0):
    """Prompts of a few words; answers of 1 word and of 10-14 words, alternating."""
    chooser = random.Random(seed)
    with path.open("w", encoding="utf-8") as file:
        for index in range(count):
            prompt = "say " + " ".join(chooser.choices(_WORDS, k=chooser.randint(2, 5)))
            length = 1 if index % 2 == 0 else chooser.randint(10, 14)
            response = " ".join(chooser.choices(_WORDS, k=length))
            file.write(json.dumps({"prompt": prompt, "response": response}) + "\n")
    return path
