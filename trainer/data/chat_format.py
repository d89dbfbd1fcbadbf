"""The chat template a model is trained in, decided once for training, "Try it" and export.

Training renders every example with `training_chat_template(tokenizer)`, "Try it" renders its
prompt with it, and `load_tokenizer` sets it on the tokenizer, so the exported `merged/`
folder saves it as its `chat_template`: plain `transformers` (`apply_chat_template` with
`add_generation_prompt=True`) then gives a download the very ids the model was trained on.

It is the tokenizer's own template, with beginning-of-sequence written first when the
tokenizer has one and the template does not write it (many base tokenizers leave it to
`tokenizer(text)`, and `apply_chat_template` tokenizes without special tokens). A tokenizer
without a template gets PLAIN_CHAT_TEMPLATE: the instruction, then the response closed by
end-of-sequence, so a model learns where to stop. Applied to its own result it changes nothing.
"""
from __future__ import annotations

# Used when a tokenizer has no chat template of its own (most base models): every message of
# the conversation so far, then the response. Rendering a conversation whose last message
# is the assistant's (without a generation prompt) writes that answer and end-of-sequence.
PLAIN_CHAT_TEMPLATE = (
    "{% if messages[-1]['role'] == 'assistant' and not add_generation_prompt %}"
    "{% set prompt_messages = messages[:-1] %}{% set answer = messages[-1]['content'] %}"
    "{% else %}{% set prompt_messages = messages %}{% set answer = none %}{% endif %}"
    "### Instruction:\n{{ prompt_messages | map(attribute='content') | join('\n\n') }}"
    "\n\n### Response:\n"
    "{% if answer is not none %}{{ answer }}{{ eos_token }}{% endif %}"
)
# What "does the template write beginning-of-sequence" is asked of.
PROBE_CONVERSATION = [{"role": "user", "content": "Hi"}]


def training_chat_template(tokenizer) -> str:
    """The template training renders with: the tokenizer's own (its default one, where it
    has several by name) or PLAIN_CHAT_TEMPLATE, beginning-of-sequence first."""
    own = tokenizer.get_chat_template() if tokenizer.chat_template else PLAIN_CHAT_TEMPLATE
    return _beginning_of_sequence_first(tokenizer, own)


def render_chats(tokenizer, conversations: list[list[dict[str, str]]], *,
                 add_generation_prompt: bool) -> list[str]:
    """Each conversation's text under the training template, in one template call."""
    return tokenizer.apply_chat_template(
        conversations, chat_template=training_chat_template(tokenizer), tokenize=False,
        add_generation_prompt=add_generation_prompt)


def use_training_chat_template(tokenizer) -> None:
    """Make the tokenizer's own `chat_template` the training one (each of its templates, where
    it has several by name): what `save_pretrained` writes into an exported folder, and what
    any caller's `apply_chat_template` renders."""
    if isinstance(tokenizer.chat_template, dict):
        tokenizer.chat_template = {name: _beginning_of_sequence_first(tokenizer, template)
                                   for name, template in tokenizer.chat_template.items()}
    else:
        tokenizer.chat_template = training_chat_template(tokenizer)


def _beginning_of_sequence_first(tokenizer, template: str) -> str:
    if tokenizer.bos_token is None or _writes_beginning_of_sequence(tokenizer, template):
        return template
    return "{{ bos_token }}" + template


def _writes_beginning_of_sequence(tokenizer, template: str) -> bool:
    [rendered] = tokenizer.apply_chat_template([PROBE_CONVERSATION], chat_template=template,
                                               tokenize=False, add_generation_prompt=True)
    return rendered.startswith(tokenizer.bos_token)


# A reply probed for what the template writes after an answer.
PROBE_ANSWER = "Hello"


def end_of_turn_ids(tokenizer) -> list[int]:
    """The tokens a reply ends at: end-of-sequence, and the special token the training
    template closes an assistant turn with when it is another (ChatML's <|im_end|> on a
    base tokenizer whose end-of-sequence is <|endoftext|>)."""
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    prompt = render_chats(tokenizer, [PROBE_CONVERSATION], add_generation_prompt=True)[0]
    full = render_chats(tokenizer, [[*PROBE_CONVERSATION,
                                     {"role": "assistant", "content": PROBE_ANSWER}]],
                        add_generation_prompt=False)[0]
    if full.startswith(prompt) and PROBE_ANSWER in full[len(prompt):]:
        after = full[len(prompt):].split(PROBE_ANSWER, 1)[1]
        tail = tokenizer(after, add_special_tokens=False).input_ids
        if tail and tail[0] in tokenizer.all_special_ids and tail[0] not in ids:
            ids.append(tail[0])
    return ids
