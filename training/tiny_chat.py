"""Tiny random targets for the --smoke runs and their tests: they run in seconds, from no files.

tiny_target is a two-layer Llama (train_head's smoke run, the feature store's tests). The chat target is
for the corpus: it works on text (user turns are decoded, filtered and re-encoded in a chat template), so
the chat target needs a tokenizer with a chat template: a word-level one over the seed files'
words, with ChatML markers like SmolLM2's. Its random model writes word salad, which is text
enough for the filters, and a bias on the end-of-turn token ends its turns after about ten
tokens, as a real model's turns end.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from training.draft_data import TASKS
from training.task_families import SEEDS
from training.text_ngrams import words


def tiny_target(vocab: int = 256, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).eval()


CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny test model.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|im_end|>", "<|im_start|>", "[UNK]"]
TURN_LENGTH = 10  # tokens a turn lasts on average


def tiny_chat_tokenizer(sources: tuple[Path, ...] = (SEEDS, TASKS)) -> PreTrainedTokenizerFast:
    vocabulary = sorted(
        {w for path in sources for w in words(json.dumps(json.loads(path.read_text()), ensure_ascii=False))}
    )
    ids = {token: i for i, token in enumerate(SPECIALS + vocabulary)}
    core = Tokenizer(models.WordLevel(ids, unk_token="[UNK]"))
    core.normalizer = normalizers.Lowercase()  # the vocabulary is training.text_ngrams.words: lower case
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="[UNK]",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHATML,
    )


def tiny_chat_model(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """train_head's tiny random Llama over this vocabulary, its output layer given a bias towards
    the end-of-turn token (p about 1 / TURN_LENGTH per step)."""
    model = tiny_target(vocab=len(tokenizer))
    model.config.tie_word_embeddings = False
    head = torch.nn.Linear(model.config.hidden_size, len(tokenizer), bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tokenizer.eos_token_id] = math.log(len(tokenizer) / (TURN_LENGTH - 1))
    model.lm_head = head
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.eos_token_id
    return model.eval()
