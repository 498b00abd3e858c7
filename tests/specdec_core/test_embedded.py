"""Integration on the embedded SmolLM2-135M-Instruct: every offline drafter is lossless under greedy decoding."""

import pytest
import torch

from specdec_core import (
    DRAFT_BF16,
    DRAFT_EARLY_EXIT,
    DRAFT_NGRAM,
    DraftConfig,
    GenerationConfig,
    autoregressive,
    encode_prompt,
    generated_tokens,
    make_drafter,
    speculative,
    stop_token_ids,
)
from specdec_core.drafters import DRAFT_EAGLE
from specdec_core.lean_pass import is_lean
from specdec_core.models import EMBEDDED_ID, load_model, load_stock
from specdec_core.tuning import cost_curve, tuning_of

pytestmark = pytest.mark.slow
PROMPT = "Return a JSON object with the keys name, city and age for: Ana lives in Lisbon and is 31."
TOKENS = 40


@pytest.fixture(scope="module")
def reference(embedded):
    prompt = encode_prompt(embedded.tokenizer, PROMPT)
    stops = stop_token_ids(embedded.tokenizer, embedded.model)
    plain = generated_tokens(autoregressive(embedded.model, prompt, GenerationConfig(max_new_tokens=TOKENS), stops))
    return prompt, stops, plain


@pytest.mark.parametrize("transformers_model", ["stock", "packed"])
def test_plain_decoding_equals_transformers_generate(embedded, reference, transformers_model):
    """The served model runs the lean pass (lean_pass.py); transformers' generate runs its own forward on
    a stock copy (MKL, dense weights) and on the packed one the training data uses (for_generate)."""
    prompt, stops, plain = reference
    assert is_lean(embedded.model)
    model = (
        load_stock(EMBEDDED_ID, torch.float32)
        if transformers_model == "stock"
        else load_model(EMBEDDED_ID, for_generate=True).model
    )
    assert not is_lean(model)
    out = model.generate(torch.tensor([prompt]), max_new_tokens=TOKENS, do_sample=False, eos_token_id=list(stops))
    assert out[0, len(prompt) :].tolist() == plain
    assert embedded.tokenizer.decode(plain).count('"') >= 4  # it really wrote JSON-ish text


def test_a_copy_for_generate_leaves_the_served_models_costs(embedded):
    """Loading the same source for transformers' generate measures its own (other) pass; what the app and
    every c read by source stays the served model's."""
    copy = load_model(EMBEDDED_ID, for_generate=True).model
    assert copy is not embedded.model and cost_curve(copy) is not None
    assert tuning_of(EMBEDDED_ID, torch.float32).curve is cost_curve(embedded.model)


@pytest.mark.parametrize("drafter", [DRAFT_EAGLE, DRAFT_BF16, DRAFT_NGRAM, DRAFT_EARLY_EXIT])
@pytest.mark.parametrize("draft_config", [DraftConfig(k=2), DraftConfig(k=5), DraftConfig(k=4, adaptive=True)], ids=str)
def test_greedy_speculative_is_token_identical(embedded, reference, drafter, draft_config):
    prompt, stops, plain = reference
    events = list(
        speculative(
            embedded.model,
            make_drafter(drafter, embedded),
            prompt,
            GenerationConfig(max_new_tokens=TOKENS),
            draft_config,
            stops,
        )
    )
    assert generated_tokens(events) == plain
    assert events[-1].summary.tokens == len(plain)


def test_chat_template_end_of_turn_stops_generation(embedded):
    prompt = encode_prompt(embedded.tokenizer, "Reply with just the word yes.")
    stops = stop_token_ids(embedded.tokenizer, embedded.model)
    assert embedded.tokenizer.convert_tokens_to_ids("<|im_end|>") in stops
    events = list(autoregressive(embedded.model, prompt, GenerationConfig(max_new_tokens=64), stops))
    assert events[-1].summary.stop_reason == "eos"
    assert generated_tokens(events)[-1] in stops
