"""Text in, token ids out: the chat template and the end-of-turn tokens, both from the tokenizer."""

from __future__ import annotations

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .errors import SpecDecError
from .limits import MAX_PROMPT_CHARS


def encode_prompt(tokenizer: PreTrainedTokenizerBase, text: str, use_chat_template: bool = True) -> list[int]:
    """The prompt as the model expects it: a user turn in its chat template, when it has one."""
    if not isinstance(text, str) or not text.strip():
        raise SpecDecError("The prompt is empty: type something for the model to continue.")
    if len(text) > MAX_PROMPT_CHARS:
        raise SpecDecError(f"The prompt has {len(text):,} characters; the limit is {MAX_PROMPT_CHARS:,}.")
    if use_chat_template and tokenizer.chat_template:
        encoded = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=True
        )
        return list(encoded["input_ids"])
    return tokenizer(text)["input_ids"]


def stop_token_ids(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel) -> frozenset[int]:
    """EOS from the generation config and tokenizer, plus the chat template's end-of-turn marker."""
    ids: set[int] = set()
    configured = model.generation_config.eos_token_id if model.generation_config else None
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(configured)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    for marker in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
        token_id = tokenizer.convert_tokens_to_ids(marker)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id and token_id >= 0:
            ids.add(token_id)
    return frozenset(ids)
