"""The AOTInductor experiment's pass (bench/aoti.py), run eagerly on a tiny model: a correct pass over an
explicit cache, so that what the package is compiled from decodes as the model does."""

import torch

import bench.aoti as aoti
from bench.aoti import ExplicitCachePass, empty_cache, greedy, pass_inputs
from tests.conftest import tiny_llama


def test_the_explicit_cache_pass_decodes_as_generate_and_hands_over_four_layers(monkeypatch):
    model = tiny_llama(seed=5, layers=30).eval()  # 30 layers: the experiment's feature layers 2, 15, 27 exist
    monkeypatch.setattr(aoti, "LONGEST_CACHE", 64)
    prompt = list(range(3, 23))  # longer than one pass: the prompt goes in chunks
    with torch.no_grad():
        ours, _ = greedy(ExplicitCachePass(model), prompt, 12, *empty_cache(model))
        theirs = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0, len(prompt):].tolist()
        logits, features = ExplicitCachePass(model)(*pass_inputs(prompt[:5], 0, *empty_cache(model)))
        stock = model(torch.tensor([prompt[:5]]), output_hidden_states=True)
    assert ours == theirs
    torch.testing.assert_close(logits, stock.logits, rtol=1e-4, atol=1e-4)
    hidden = model.config.hidden_size
    assert features.shape[-1] == 4 * hidden
    for block, layer in enumerate((2, 15, 27)):  # hidden_states[i + 1] is layer i's output
        torch.testing.assert_close(features[..., block * hidden : (block + 1) * hidden], stock.hidden_states[layer + 1], rtol=1e-4, atol=1e-4)
    last = features[..., 3 * hidden :]  # the last layer's output, before the final norm: the logits come from it
    torch.testing.assert_close(model.lm_head(model.model.norm(last)), stock.logits, rtol=1e-4, atol=1e-4)
