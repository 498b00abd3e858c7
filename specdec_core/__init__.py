"""specdec_core: speculative decoding as a stream of typed events.

    target = load_model(EMBEDDED_ID)
    prompt = encode_prompt(target.tokenizer, "List three colours as JSON.")
    for event in speculative(target.model, make_drafter(DRAFT_NGRAM, target), prompt, GenerationConfig()):
        ...

Files, one idea each: config (validated settings), limits, events (what a run yields), sampling
(logits to tokens), acceptance (the rule), kv_cache (a model with rollback), lean_pass (the pass it
runs), drafters/ (the protocol, n-gram lookup, model drafts and self-copies, the EAGLE head), schedule (draft length),
engine (the two decoders), stats, theory, prompts, sources (where a model comes from, its size,
public mode), models (loading), cpu_kernels (the CPU linears), machine (which CPU this is),
tuning (kernels and costs measured on it). Training (training/) and benchmarking (bench/) live
outside this package.
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

__all__ = [name for name in dir() if not name.startswith("_")]
