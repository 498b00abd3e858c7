"""Shared fixtures: tiny random models built in the test, and the embedded model (loaded once)."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
# Measured costs go to a fresh folder, shared with the app processes the tests start: tests never read
# timings another machine left (the converted embedded model stays in the usual cache: it is the same anywhere).
os.environ.setdefault("SPECDEC_TUNING_DIR", tempfile.mkdtemp(prefix="specdec-tuning-"))

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_core.cpu_kernels import speed_up_linears

torch.set_num_threads(2)


@torch.inference_mode()
def layer_outputs(model: LlamaForCausalLM, tokens: list[int]) -> list[torch.Tensor]:
    """Each decoder layer's output [T, H] (the last before the final norm), by running the layers here one by
    one: a reference for the features the engine and training hand over, independent of transformers'
    hidden-state numbering and its config flags."""
    hidden = model.model.embed_tokens(torch.tensor([tokens]))
    positions = torch.arange(len(tokens))[None]
    embeddings = model.model.rotary_emb(hidden, positions)
    outputs = []
    for layer in model.model.layers:  # no mask: one sequence, causal
        hidden = layer(hidden, position_embeddings=embeddings, position_ids=positions, attention_mask=None)
        outputs.append(hidden[0])
    return outputs


def tiny_llama(seed: int, vocab_size: int = 32, layers: int = 2, window: int = 256, fast: bool = True) -> LlamaForCausalLM:
    """A random 2-layer Llama: real attention, real KV cache, a forward pass in well under a millisecond.
    fast: with the project's CPU linears (cpu_kernels.speed_up_linears); else stock nn.Linear."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=window,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=None,
    )
    model = LlamaForCausalLM(config).eval()
    # Sharper logits than the init gives, so that greedy paths are not near-ties.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return speed_up_linears(model) if fast else model


@pytest.fixture(params=["native", "avx2"])
def cpu_path(request):
    """Runs a test on this CPU's own kernel path and on that of a CPU without AVX-512 (no oneDNN
    bfloat16), so that one machine tests both. On an AVX2-only machine the two are the same path."""
    from specdec_core.cpu_kernels import avx2_forced, force_avx2_path

    before = avx2_forced()
    force_avx2_path(request.param == "avx2")
    yield request.param
    force_avx2_path(before)


@pytest.fixture(scope="session")
def target_model() -> LlamaForCausalLM:
    return tiny_llama(seed=1)


def noisy_copy(model: LlamaForCausalLM, noise: float, seed: int) -> LlamaForCausalLM:
    """The model with Gaussian noise on every weight: a draft that agrees with it sometimes."""
    torch.manual_seed(seed)
    copy = tiny_llama(seed=0, vocab_size=model.config.vocab_size, layers=model.config.num_hidden_layers)
    copy.load_state_dict(model.state_dict())
    with torch.no_grad():
        for param in copy.parameters():
            param.add_(torch.randn_like(param) * noise * param.std())
    return copy


@pytest.fixture(scope="session")
def draft_model(target_model) -> LlamaForCausalLM:
    return noisy_copy(target_model, noise=0.6, seed=2)


@pytest.fixture(scope="session")
def embedded():
    from specdec_core import EMBEDDED_ID, load_model

    return load_model(EMBEDDED_ID)
