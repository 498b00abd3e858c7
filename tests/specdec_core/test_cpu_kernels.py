"""The CPU linears compute what nn.Linear computes on both kernel paths (AVX-512 with oneDNN
bfloat16, and without), never use a stale packed weight, and never compute with a released one."""

import copy
import os
import subprocess
import sys

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_core import cpu_kernels
from specdec_core.cpu_kernels import (
    MKL_PACKED,
    PACKED,
    STOCK,
    KernelPlan,
    onednn_supports,
    quantize_linears_int8,
    release_dense_weights,
    set_kernel_plan,
    speed_up_linears,
)


def linear(bias: bool = True) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(24, 40, bias=bias)


def tiny_tied_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).eval()


IDS = torch.tensor([[1, 5, 7, 3, 9]])


@pytest.mark.parametrize("rows", [1, 2, 5, 17, 80])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    "plan",
    [
        KernelPlan(),
        KernelPlan(STOCK, STOCK),
        KernelPlan(PACKED, STOCK),
        KernelPlan(STOCK, PACKED),
        KernelPlan(PACKED, PACKED, (2,)),
        KernelPlan(STOCK, STOCK, (2, 5)),
        KernelPlan(STOCK, PACKED, (), (STOCK, STOCK)),
        KernelPlan(PACKED, PACKED, (3,), (STOCK, PACKED, STOCK)),
        KernelPlan(MKL_PACKED, MKL_PACKED),
        KernelPlan(STOCK, PACKED, (), (STOCK, MKL_PACKED, MKL_PACKED)),
        KernelPlan(MKL_PACKED, STOCK, (2,), (MKL_PACKED,)),
    ],
)
def test_patched_linear_matches_stock(rows, bias, plan, cpu_path):
    stock = linear(bias)
    patched = speed_up_linears(torch.nn.Sequential(copy.deepcopy(stock)))
    set_kernel_plan(patched, plan)
    x = torch.randn(1, rows, 24)
    assert "forward" in patched[0].__dict__
    torch.testing.assert_close(patched(x), stock(x))


@pytest.fixture
def kernel_calls(monkeypatch) -> list[tuple[int, str]]:
    """(rows, kernel) of every call the patched linears make, as the kernel sees them."""
    calls = []
    real = cpu_kernels._linear
    monkeypatch.setattr(
        cpu_kernels, "_linear", lambda module, x, kernel: calls.append((x.shape[-2], kernel)) or real(module, x, kernel)
    )
    return calls


def test_padded_rows_are_computed_one_row_wider_and_give_the_same_rows(cpu_path, kernel_calls):
    stock = linear()
    patched = speed_up_linears(torch.nn.Sequential(copy.deepcopy(stock)))
    set_kernel_plan(patched, KernelPlan(PACKED, PACKED, (2,)))
    release_dense_weights(patched)  # as the served target: its packed weights only
    for shape in ((1, 1, 24), (1, 2, 24), (1, 3, 24), (2, 1, 24), (2, 24)):  # a batch of two one-token rows too
        x = torch.randn(shape)
        torch.testing.assert_close(patched(x), stock(x))
    assert [rows for rows, _ in kernel_calls] == [1, 3, 3, 3, 3]


def test_each_row_count_runs_the_kernel_its_plan_names(cpu_path, kernel_calls):
    stock = linear()
    patched = speed_up_linears(torch.nn.Sequential(copy.deepcopy(stock)))
    set_kernel_plan(patched, KernelPlan(PACKED, STOCK, (3,), (STOCK, PACKED, PACKED)))
    for rows in range(1, 7):
        x = torch.randn(1, rows, 24)
        torch.testing.assert_close(patched(x), stock(x))
    assert kernel_calls == [
        (1, PACKED),
        (2, STOCK),
        (4, PACKED),
        (4, PACKED),
        (5, STOCK),
        (6, STOCK),
    ]  # 3 rows computed as 4


def test_forced_avx2_path_turns_off_onednn_bfloat16_only(cpu_path):
    assert onednn_supports(torch.float32) == torch.backends.mkldnn.is_available()
    if cpu_path == "avx2":
        assert not onednn_supports(torch.bfloat16)
    else:
        assert onednn_supports(torch.bfloat16) == torch.ops.mkldnn._is_mkldnn_bf16_supported()


def test_packed_weight_follows_weight_changes(cpu_path):
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_released_dense_weights_keep_outputs_and_tied_weights(dtype, cpu_path):
    """Packing then releasing the dense copies changes no output; the tied lm_head stays readable;
    a released weight cast to another dtype is refused the same way on every CPU, never computed on."""
    model = tiny_tied_llama().to(dtype)
    with torch.no_grad():
        before = model(IDS).logits
        release_dense_weights(speed_up_linears(model))
        after = model(IDS).logits
    torch.testing.assert_close(before, after, atol=1e-4 if dtype == torch.float32 else 5e-2, rtol=1e-2)
    released = onednn_supports(dtype)  # only what oneDNN holds packed can be released
    assert model.model.layers[0].mlp.up_proj.weight.is_meta == released
    assert not model.lm_head.weight.is_meta and model.lm_head.weight is model.model.embed_tokens.weight
    if released:
        other = torch.float32 if dtype == torch.bfloat16 else torch.bfloat16
        with pytest.raises(RuntimeError, match="released"):
            model.to(other)(IDS)


@pytest.mark.parametrize("plan", [KernelPlan(PACKED, STOCK), KernelPlan(PACKED, PACKED, (), (STOCK,))])
def test_a_plan_that_reads_dense_weights_keeps_them(plan, cpu_path):
    model = speed_up_linears(tiny_tied_llama())
    set_kernel_plan(model, plan)
    with torch.no_grad():
        before = model(IDS).logits
        release_dense_weights(model)
        assert not model.model.layers[0].mlp.up_proj.weight.is_meta
        torch.testing.assert_close(model(IDS).logits, before)


MKL_PLANS = [KernelPlan(MKL_PACKED, MKL_PACKED), KernelPlan(MKL_PACKED, PACKED, (), (MKL_PACKED, PACKED, MKL_PACKED))]


@pytest.mark.parametrize("plan", MKL_PLANS)
def test_mkl_packed_weights_compute_alone_once_the_dense_ones_are_released(plan, cpu_path):
    """MKL's op is handed a zero-strided stand-in for the plain weight (its shape and dtype): were it ever to compute
    with it, the outputs would be zeros. Released, each packed kernel the plan names keeps its copy, and only those."""
    model = speed_up_linears(tiny_tied_llama())
    set_kernel_plan(model, plan)
    with torch.no_grad():
        before = [model(IDS[:, :n]).logits for n in range(1, 6)]  # 1..5 rows: every kernel of the plan
        release_dense_weights(model)
        after = [model(IDS[:, :n]).logits for n in range(1, 6)]
    for old, new in zip(before, after):
        torch.testing.assert_close(new, old)
        assert new.abs().amax() > 0
    up = model.model.layers[0].mlp.up_proj
    assert up.weight.is_meta == torch.backends.mkl.is_available()  # without MKL the plan runs stock: kept dense
    if up.weight.is_meta:
        assert (up in cpu_kernels._packed[PACKED]) == (PACKED in plan.kernels) and up in cpu_kernels._packed[MKL_PACKED]


def test_resident_bytes_count_every_copy_a_plan_keeps(cpu_path):
    """Released under oneDNN alone, each weight is one packed copy; a plan with stock, oneDNN and MKL widths keeps
    the dense weight and both packs: two copies more of every linear, and the tied lm_head's two packs beside it."""

    def released(plan: KernelPlan) -> LlamaForCausalLM:
        model = speed_up_linears(tiny_tied_llama())
        set_kernel_plan(model, plan)
        return release_dense_weights(model)  # no pass yet: setting the plan packed what it reads

    one_copy, three = released(KernelPlan(PACKED, PACKED)), released(KernelPlan(STOCK, PACKED, (), (MKL_PACKED,)))
    lm_head = one_copy.lm_head.weight.numel() * 4
    assert cpu_kernels.linear_weight_bytes(one_copy) == cpu_kernels.linear_weight_bytes(three) > lm_head
    extra = cpu_kernels.resident_bytes(three) - cpu_kernels.resident_bytes(one_copy)
    assert extra == 2 * cpu_kernels.linear_weight_bytes(one_copy) - lm_head  # the tied lm_head was dense in both


def test_a_plan_packs_what_it_reads_when_set_and_drops_the_rest(cpu_path):
    model = speed_up_linears(tiny_tied_llama())
    up = model.model.layers[0].mlp.up_proj
    set_kernel_plan(model, KernelPlan(STOCK, PACKED, (), (MKL_PACKED,)))
    assert (
        up in cpu_kernels._packed[PACKED]
        and (up in cpu_kernels._packed[MKL_PACKED]) == torch.backends.mkl.is_available()
    )
    set_kernel_plan(model, KernelPlan(STOCK, STOCK))
    assert up not in cpu_kernels._packed[PACKED] and up not in cpu_kernels._packed[MKL_PACKED]


def test_mkl_packed_gemm_runs_stock_in_bfloat16(cpu_path, kernel_calls):
    """MKL packs float32 alone: a bfloat16 model under an MKL plan computes stock, and keeps its dense weights."""
    model = speed_up_linears(tiny_tied_llama().to(torch.bfloat16))
    set_kernel_plan(model, KernelPlan(MKL_PACKED, MKL_PACKED))
    with torch.no_grad():
        out = model(IDS).logits
        release_dense_weights(model)
    assert out.dtype == torch.bfloat16 and not model.model.layers[0].mlp.up_proj.weight.is_meta
    assert model.model.layers[0].mlp.up_proj not in cpu_kernels._packed[MKL_PACKED]


def test_int8_linears_stay_close_to_float32():
    stock = torch.nn.Sequential(linear())
    quantized = quantize_linears_int8(copy.deepcopy(stock))
    assert type(quantized[0]) is not torch.nn.Linear
    x = torch.randn(5, 24)
    error = (quantized(x) - stock(x)).abs().max() / stock(x).abs().max()
    assert 0 < error < 0.05  # rounded, so not identical, but close: a draft's guesses barely change


def test_forcing_avx2_at_start_caps_every_kernel():
    """SPECDEC_FORCE_AVX2=1 in a new process: ATen's kernels, oneDNN (no bfloat16) and MKL run as on an
    AVX2-only CPU, and the lean pass still gives transformers' logits there."""
    code = (
        "import specdec_core, torch, copy\n"
        "from specdec_core.machine import this_machine\n"
        "from specdec_core.cpu_kernels import onednn_supports, speed_up_linears\n"
        "from specdec_core.lean_pass import fuse_projections, run_pass\n"
        "from transformers import DynamicCache\n"
        "from tests.conftest import tiny_llama\n"
        "stock = tiny_llama(seed=3, fast=False); lean = copy.deepcopy(stock); fuse_projections(lean); "
        "speed_up_linears(lean)\n"
        "ids = torch.tensor([[1, 2, 3, 4, 5]])\n"
        "ours = run_pass(lean, ids, DynamicCache(config=lean.config), logits_to_keep=5)[0]\n"
        "print(this_machine().kernel_isa, onednn_supports(torch.bfloat16), "
        "torch.allclose(ours, stock(ids).logits, atol=1e-5))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "SPECDEC_FORCE_AVX2": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["AVX2", "False", "True"]
