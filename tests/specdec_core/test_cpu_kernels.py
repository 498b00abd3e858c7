"""The prepacked CPU linears compute what nn.Linear computes, and never use a stale packed weight."""

import copy

import pytest
import torch

from specdec_core.cpu_kernels import onednn_supports, speed_up_linears


def linear(bias: bool = True) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(24, 40, bias=bias)


@pytest.mark.parametrize("rows", [1, 2, 5, 17, 80])
@pytest.mark.parametrize("bias", [True, False])
def test_patched_linear_matches_stock(rows, bias):
    stock = linear(bias)
    patched = speed_up_linears(torch.nn.Sequential(copy.deepcopy(stock)))[0]
    x = torch.randn(1, rows, 24)
    assert "forward" in patched.__dict__
    torch.testing.assert_close(patched(x), stock(x))


def test_packed_weight_follows_weight_changes():
    module = speed_up_linears(torch.nn.Sequential(linear()))[0]
    x = torch.randn(3, 24)
    module(x)  # packs
    with torch.no_grad():
        module.weight.mul_(2.0)  # in place: same storage, new version
    torch.testing.assert_close(module(x), torch.nn.functional.linear(x, module.weight, module.bias))
    module.to(torch.bfloat16)  # a cast: new storage and dtype
    out = module(x.bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, torch.nn.functional.linear(x.bfloat16(), module.weight, module.bias))


def test_unsupported_dtype_falls_back_to_stock():
    module = speed_up_linears(torch.nn.Sequential(linear()))[0].half()
    x = torch.randn(2, 24).half()
    assert not onednn_supports(torch.float16)
    torch.testing.assert_close(module(x), torch.nn.functional.linear(x, module.weight, module.bias))


def test_released_dense_weights_keep_outputs_and_tied_weights():
    """Packing then releasing the dense copies changes no output; the tied lm_head stays readable."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from specdec_core.cpu_kernels import release_dense_weights

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(config).eval()
    ids = torch.tensor([[1, 5, 7, 3, 9]])
    with torch.no_grad():
        before = model(ids).logits
        release_dense_weights(speed_up_linears(model))
        after = model(ids).logits
    assert torch.allclose(before, after, atol=1e-4)
    assert model.model.layers[0].mlp.up_proj.weight.is_meta  # released: only the packed copy is left
    assert not model.lm_head.weight.is_meta and model.lm_head.weight is model.model.embed_tokens.weight
    with pytest.raises(RuntimeError, match="released"):
        model.bfloat16()(ids)
