"""specdec_core: speculative decoding as a stream of typed events.

    target = load_model(EMBEDDED_ID)
    prompt = encode_prompt(target.tokenizer, "List three colours as JSON.")
    for event in speculative(target.model, make_drafter(DRAFT_NGRAM, target), prompt, GenerationConfig()):
        ...

Files, one idea each, from the bottom up: errors, limits, config (validated settings); costs (the cost
curve and a step's price) and tree (draft-tree geometry and masks); events (what a run yields), sampling
(logits to tokens), acceptance (the rule); lean_pass (the pass a served model runs), kv_cache (a model with
rollback and compaction); cpu_kernels (the CPU linears), machine (which CPU this is); sources (where a model
comes from, its size, public mode, the cache dir), embedded (the default model's GGUF); measurements (kept per
machine) and tuning (kernels and costs measured on it); models (loading); eval_sets; drafters/ (the
protocol, n-gram lookup, model drafts and self-copies, the EAGLE head, the hybrid, and the factory on top);
schedule (draft length), engine (the two decoders), stats, theory, prompts. Training (training/) and
benchmarking (bench/) live outside this package.
"""

from . import cpu_kernels  # noqa: F401  (first: SPECDEC_FORCE_AVX2 caps the kernels before anything computes)
from .config import DraftConfig, GenerationConfig, SamplingConfig
from .drafters import (
    DRAFT_BF16,
    DRAFT_EAGLE,
    DRAFT_EARLY_EXIT,
    DRAFT_NGRAM,
    Draft,
    Drafter,
    ModelDrafter,
    NgramDrafter,
    make_drafter,
)
from .engine import autoregressive, speculative
from .errors import ModelLoadError, SpecDecError, VocabularyMismatchError
from .events import (
    ACCEPTED,
    BONUS,
    CORRECTION,
    REJECTED,
    TARGET,
    Event,
    Finished,
    PlainStep,
    SpecStep,
    Summary,
)
from .models import LoadedModel, check_same_vocabulary, load_model
from .prompts import encode_prompt, stop_token_ids
from .sources import EMBEDDED_ID
from .stats import generated_tokens, per_position_acceptance, summarize
from .theory import expected_speedup, expected_tokens_per_step

__all__ = [
    "ACCEPTED",
    "BONUS",
    "CORRECTION",
    "DRAFT_BF16",
    "DRAFT_EAGLE",
    "DRAFT_EARLY_EXIT",
    "DRAFT_NGRAM",
    "EMBEDDED_ID",
    "REJECTED",
    "TARGET",
    "Draft",
    "DraftConfig",
    "Drafter",
    "Event",
    "Finished",
    "GenerationConfig",
    "LoadedModel",
    "ModelDrafter",
    "ModelLoadError",
    "NgramDrafter",
    "PlainStep",
    "SamplingConfig",
    "SpecDecError",
    "SpecStep",
    "Summary",
    "VocabularyMismatchError",
    "autoregressive",
    "check_same_vocabulary",
    "cpu_kernels",
    "encode_prompt",
    "expected_speedup",
    "expected_tokens_per_step",
    "generated_tokens",
    "load_model",
    "make_drafter",
    "per_position_acceptance",
    "speculative",
    "stop_token_ids",
    "summarize",
]
