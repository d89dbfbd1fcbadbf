"""Text from a trained job's model, for the job page's "Try it" panel: a process the worker
keeps alive while prompts keep coming (`python -m trainer.generation --serve`, one JSON
question a line, tunedeck/services/line_server.py), so the second prompt finds the model loaded.

A question names the weights (a model folder or id, and an adapter folder on top of it for
the adapter variant), the device, the conversation and the sampling. The prompt is rendered
and tokenized by the trainer's own `prompt_token_ids`, so the model meets it as it met its
training examples. Temperature 0 is greedy decoding: the same prompt, the same text.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from trainer.data.datasets import prompt_token_ids
from trainer.model.model_source import load_base_model, load_tokenizer, resolve_model_source

# Loaded models kept: two, so "Compare with base" (the base, then the fine-tune, then the
# base again for the next prompt) never reloads either.
KEPT_MODELS = 2


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    load_seconds: float


class ModelShelf:
    """The last KEPT_MODELS models loaded, by (weights, device); the oldest goes first."""

    def __init__(self, kept: int = KEPT_MODELS):
        self._kept = kept
        self._models: OrderedDict[tuple, LoadedModel] = OrderedDict()

    def get(self, request: dict) -> tuple[LoadedModel, bool]:
        """The model the request names, and whether it was loaded already."""
        key = (request["model_source"], request.get("adapter_dir"), request["device"])
        if key in self._models:
            self._models.move_to_end(key)
            return self._models[key], True
        while len(self._models) >= self._kept:
            self._models.popitem(last=False)
        loaded = load_for_generation(request)
        self._models[key] = loaded
        return loaded, False


def load_for_generation(request: dict) -> LoadedModel:
    """The model and tokenizer as training loaded them (trainer/model/model_source.py), the adapter
    on top for the adapter variant, on the request's device, in eval mode."""
    import torch

    started = time.perf_counter()
    source = resolve_model_source(request["model_source"])
    trust_remote_code = bool(request.get("trust_remote_code"))
    model = load_base_model(source, trust_remote_code=trust_remote_code)
    if request.get("adapter_dir"):
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, request["adapter_dir"])
    device = torch.device(request["device"])
    if device.type == "cuda":
        # fp32 masters are for training; bf16 answers at twice the speed in half the memory.
        model = model.to(torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
    model = model.to(device).eval()
    model.config.use_cache = True  # load_base_model turns the KV cache off for training
    tokenizer = load_tokenizer(source, trust_remote_code=trust_remote_code)
    return LoadedModel(model, tokenizer, time.perf_counter() - started)


def generate(loaded: LoadedModel, request: dict) -> dict:
    """`{"text", "tokens", "seconds"}`: the answer to the conversation, without the prompt
    and without special tokens; `seconds` is the generation alone."""
    import torch

    model, tokenizer = loaded.model, loaded.tokenizer
    messages = tuple({"role": message["role"], "content": message["content"]}
                     for message in request["messages"])
    device = next(model.parameters()).device
    input_ids = torch.tensor([prompt_token_ids(tokenizer, messages)], device=device)
    sampling = {"do_sample": False}
    if request["temperature"] > 0:
        sampling = {"do_sample": True, "temperature": request["temperature"],
                    "top_p": request["top_p"]}
        if request.get("seed") is not None:
            torch.manual_seed(request["seed"])
    else:
        # The model's generation_config may ask for sampling; greedy means greedy.
        sampling.update(temperature=None, top_p=None, top_k=None)
    started = time.perf_counter()
    with torch.inference_mode():
        output = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                max_new_tokens=request["max_new_tokens"],
                                pad_token_id=tokenizer.pad_token_id,
                                eos_token_id=tokenizer.eos_token_id, **sampling)
    seconds = time.perf_counter() - started
    new_ids = output[0, input_ids.shape[1]:].tolist()
    return {"text": tokenizer.decode(new_ids, skip_special_tokens=True), "tokens": len(new_ids),
            "seconds": round(seconds, 4), "prompt_tokens": int(input_ids.shape[1])}


def answer_with(shelf: ModelShelf):
    def answer(request: dict) -> dict:
        try:
            loaded, warm = shelf.get(request)
        except (OSError, ValueError) as error:
            return {"error": f"the {request.get('variant', 'model')} weights could not be "
                             f"loaded: {error}"}
        return {**generate(loaded, request), "warm": warm, "device": request["device"],
                "load_seconds": 0.0 if warm else round(loaded.load_seconds, 4)}
    return answer


def main() -> int:
    """`--serve`: answer generation questions a line each, for the worker
    (worker/generation.py), which stops this process once it has been idle a while."""
    from tunedeck.services.line_server import serve_lines

    serve_lines(answer_with(ModelShelf()))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
