"""The prepacked CPU linears compute what nn.Linear computes, and never use a stale packed weight."""

import copy

import pytest
import torch

from specdec_core.cpu_kernels import onednn_supports, speed_up_linears, without_speed_up


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


def test_without_speed_up_restores_stock_forward(target_model):
    model = without_speed_up(copy.deepcopy(target_model))
    assert all("forward" not in m.__dict__ for m in model.modules())
    ids = torch.tensor([[0, 5, 9, 5]])
    torch.testing.assert_close(model(ids).logits, target_model(ids).logits, rtol=1e-4, atol=1e-4)
