"""A causal LM as the draft: a smaller model of the family, or a copy of the target itself
(a cheaper dtype, or its first layers: the self-copies, built here)."""

from __future__ import annotations

import copy
import time

import torch
from transformers import PreTrainedModel

from ..costs import CONTEXT_TOKENS
from ..errors import SpecDecError
from ..events import DRAFT_MODEL
from ..kv_cache import CachedModel
from ..measurements import median_seconds
from ..models import MODELS, LoadedModel, _load, default_dtype
from ..sampling import Sampler
from ..sources import classify, loaded_bytes, parameter_count
from ..tree import chain
from ..tuning import c_at_load, cost_curve, record_draft_pass
from .base import Draft, Drafter

EARLY_EXIT_LAYERS = 8  # of SmolLM2-135M's 30: a draft that is cheap and often wrong, on purpose


class ModelDrafter(Drafter):
    """A small causal LM that samples its guesses with the run's own sampler (same warpers as the target)."""

    def __init__(
        self,
        model: PreTrainedModel,
        name: str = "draft model",
        min_confidence: float = 0.0,
        shares_target_weights: bool = False,
        c: float | None = None,
    ) -> None:
        """c: one pass of model over one target pass, measured at load (measure_draft_pass), or None."""
        self.name = name
        self._c = c
        self.min_confidence = min_confidence
        self.shares_target_weights = shares_target_weights  # a copy or truncation of the target itself
        self._model = CachedModel(model)
        self._proposal_start = 0  # context length when the last proposal began
        self._target: CachedModel | None = None  # whose cache a draft sharing its weights adopts (begin)

    @property
    def c_at_load(self) -> float | None:
        return self._c

    @property
    def reads_what_it_missed(self) -> bool:
        return not self.shares_target_weights

    def begin(self, target: CachedModel) -> None:
        if self.shares_target_weights:
            self._target = target
            self._model.adopt(target, target.length)

    def propose(self, context: list[int], k: int, sampler: Sampler) -> Draft:
        started = time.perf_counter()
        passes_before = self._model.passes
        self._proposal_start = len(context)
        if self._target is not None:  # the target's cache holds the context but its newest token
            self._model.adopt(self._target, self._target.length)
        # The cache holds a prefix of context; feeding the rest first also catches up on the
        # bonus/correction token of the last step and any steps taken without drafting.
        feed = context[self._model.length :]
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for _ in range(k):
            q = sampler.probs(self._model.forward(feed))[0]  # [V]
            if self.min_confidence and float(q.max()) < self.min_confidence:
                break
            token = sampler.pick(q)
            tokens.append(token)
            rows.append(q)
            feed = [token]
        probs = torch.stack(rows) if rows else None
        confidence = probs[torch.arange(len(tokens)), tokens] if rows else None
        return Draft(
            tuple(tokens),
            chain(len(tokens)),
            probs,
            confidence,
            self._model.passes - passes_before,
            time.perf_counter() - started,
            (DRAFT_MODEL,) * len(tokens),
        )

    def observe(self, accepted_count: int) -> None:
        # KV rollback: keep the context plus the accepted drafts this cache has seen; the
        # rejected ones (and the last draft, never fed) are recomputed from the context next time.
        self._model.rollback(self._proposal_start + accepted_count)


def reduced_copy(source: str, dtype: torch.dtype, for_generate: bool = False) -> PreTrainedModel:
    """The target's weights in a cheaper dtype: a draft that agrees with it almost always.

    Read again from the target's own files (the loaded target keeps only packed weights).
    Whether it is cheaper depends on the CPU's kernels: its cost c is measured when it is made
    (measure_draft_pass) and shown in the app. float16 is not offered: these CPUs have no oneDNN
    float16 path, and MKL's makes a 5-token pass ~5x a 1-token one."""
    kind = classify(source)
    parameters = parameter_count(source, kind)
    size = loaded_bytes(parameters, dtype) if parameters else 0
    key = ("copy for generate" if for_generate else "copy", source, dtype)
    load = lambda: _load(source, kind, dtype, lean=not for_generate, draft_copy=True).model  # noqa: E731
    return MODELS.get(key, f"{source} ({dtype})", size, load)


DRAFT_PASS_REPEATS = 15  # c decides whether a draft runs at all (a bfloat16 copy without AVX-512 BF16 is near 1)


def measure_draft_pass(target: LoadedModel, spec: str, model: PreTrainedModel) -> None:
    """Records one pass of a model draft (for c), once per target and drafter: its T(1) from the
    tuning of its own load where it has one (a hub draft), else timed here (the target's copies, tuned
    without a cost curve), each one-token pass right after another, as the draft runs them."""
    if c_at_load(target.source, default_dtype(), spec) is not None:
        return
    how = str(next(model.parameters()).dtype).removeprefix("torch.")
    curve = cost_curve(model)
    if curve is not None:
        record_draft_pass(target.source, spec, curve.seconds[0], how)
        return
    cache = CachedModel(model)
    cache.forward(list(range(100, 100 + CONTEXT_TOKENS)))
    seconds = median_seconds(lambda: (cache.forward([5]), cache.rollback(CONTEXT_TOKENS)), DRAFT_PASS_REPEATS)
    record_draft_pass(target.source, spec, seconds, how)


def early_exit_copy(model: PreTrainedModel, layers: int) -> PreTrainedModel:
    """The target truncated to its first `layers` decoder layers, sharing their weights (no extra memory)."""
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or layers >= len(inner.layers):
        raise SpecDecError(f"An early-exit draft needs a decoder with more than {layers} layers.")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:layers]
    with torch.device("meta"):
        draft = type(model)(config)
    draft.model.embed_tokens = inner.embed_tokens
    draft.model.layers = torch.nn.ModuleList(inner.layers[:layers])
    draft.model.norm = inner.norm
    draft.model.rotary_emb = inner.rotary_emb
    draft.lm_head = model.lm_head
    return draft.eval()
