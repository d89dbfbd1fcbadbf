"""`builtin:tiny-llama`: a tiny random Llama and a real tokenizer, made offline.

Every path of the product (both backends, LoRA and full, merge and download) must run on a
laptop and in CI without a download, so the model is generated here from a fixed seed and
cached under `$TUNEDECK_HOME/builtin/tiny-llama`. Several ranks (and several jobs) may ask for
it at once: each builds in its own temporary folder and renames it into place; a loser of
that race discards its copy and uses the winner's, which is identical by construction.
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

BUILTIN_MODEL_NAME = "tiny-llama"
BUILTIN_SEED = 1234
VOCAB_SIZE = 384
BOS_TOKEN, EOS_TOKEN, PAD_TOKEN = "<s>", "</s>", "<pad>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")

# One turn per message, each closed by the end-of-sequence token, so a model learns to stop
# after its answer; a generation prompt opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# Plain English for the tokenizer's merges, so instruction data in tests and demos gets
# sensible tokens and not only bytes.
_WORDS = (
    "the a an of to and in is it that for on with as be this was are what how why which "
    "answer question number sum difference product add subtract plus minus equals result "
    "write say tell give name list explain describe translate summarize repeat word words "
    "hello world yes no one two three four five six seven eight nine ten cat dog sun moon "
    "red blue green small big fast slow day night water fire tree house book model train"
).split()


def builtin_model_dir(home: Path) -> Path:
    return home / "builtin" / BUILTIN_MODEL_NAME


def ensure_builtin_model(home: Path) -> Path:
    """The cached folder, built first if missing (safe when several processes race)."""
    final_dir = builtin_model_dir(home)
    if (final_dir / "config.json").exists():
        return final_dir
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    staging_dir = Path(tempfile.mkdtemp(prefix=f".{BUILTIN_MODEL_NAME}-", dir=final_dir.parent))
    staging_dir.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users
    try:
        write_builtin_model(staging_dir)
        os.rename(staging_dir, final_dir)
    except OSError:
        # Another process renamed its identical copy into place first.
        if not (final_dir / "config.json").exists():
            raise
    finally:
        shutil.rmtree(staging_dir, ignore_errors=True)
    return final_dir


def write_builtin_model(folder: Path) -> None:
    from safetensors.torch import save_file

    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    # Not model.save_pretrained: once torch.distributed is up it writes only on rank 0, and
    # any rank may be the one building this cache.
    model.config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(folder)


def tokenizer_training_text(seed: int = BUILTIN_SEED) -> list[str]:
    from trainer.data.builtin_dataset import arithmetic_pairs

    rng = random.Random(seed)
    lines = [f"{prompt} {response}" for prompt, response in arithmetic_pairs()]
    for _ in range(2000):
        lines.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12))) + ".")
    return lines


def build_tokenizer():
    """A byte-level BPE: any text encodes (no unknown token), and training is deterministic."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special_tokens = [PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, *ROLE_TOKENS]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe_trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=special_tokens, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(tokenizer_training_text(), trainer=bpe_trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=BOS_TOKEN, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
        extra_special_tokens=list(ROLE_TOKENS), chat_template=CHAT_TEMPLATE,
        model_max_length=2048,
    )


def build_model(tokenizer):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=2048, tie_word_embeddings=False,
        # Llama's usual 0.02 leaves a 64-wide frozen head too weak for LoRA to move the
        # logits much; at 0.1 a LoRA run on builtin:arithmetic halves its loss in 40 steps.
        initializer_range=0.1,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # A private RNG stream: the weights depend on the seed alone, and the caller's global
    # RNG state (which seeds LoRA and dropout) is left untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(BUILTIN_SEED)
        model = LlamaForCausalLM(config)
    return model.to(torch.float32)
