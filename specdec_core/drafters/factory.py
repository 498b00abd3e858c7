"""make_drafter: a drafter spec (a name the app and the API use, or a model source) made into a fresh drafter for
one run, with this machine's measured costs."""

from __future__ import annotations

import torch

from ..models import LoadedModel, check_same_vocabulary, default_dtype, load_model
from ..tuning import c_at_load, cost_curve, draft_pass, record_draft_pass
from .base import Drafter
from .eagle import EagleDrafter, TreeShape
from .head_variants import DRAFT_EAGLE_PREFIX, DRAFT_EAGLE_TREE_PREFIX, DRAFT_HYBRID_PREFIX, eagle_head
from .hybrid import HybridDrafter
from .model_draft import EARLY_EXIT_LAYERS, ModelDrafter, early_exit_copy, measure_draft_pass, reduced_copy
from .ngram import NgramDrafter

# Drafter specs besides a model source: copies of the target itself, and the model-free lookup.
DRAFT_BF16 = "self:bfloat16"
DRAFT_EARLY_EXIT = "self:early-exit"
DRAFT_NGRAM = "ngram"
DRAFT_EAGLE = DRAFT_EAGLE_PREFIX + "eagle-smollm2-135m"  # the head trained here for the embedded target
DRAFT_EAGLE_TREE = DRAFT_EAGLE_TREE_PREFIX + "eagle-smollm2-135m"  # the same head drafting EAGLE-2 trees
DRAFT_HYBRID = DRAFT_HYBRID_PREFIX + "eagle-smollm2-135m"  # n-gram lookup and the head's tree in one tree


def make_drafter(spec: str, target: LoadedModel, min_confidence: float = 0.0) -> Drafter:
    """A fresh drafter for one run: DRAFT_NGRAM, DRAFT_BF16, DRAFT_EARLY_EXIT, "eagle:<folder in assets/>" (a chain),
    "eagle-tree:<folder>" (EAGLE-2 trees sized by this machine's cost curve), "hybrid:<folder>" or a model source."""
    if spec == DRAFT_NGRAM:
        return NgramDrafter()
    if spec.startswith(DRAFT_EAGLE_PREFIX):
        head = eagle_head(target.source, spec.removeprefix(DRAFT_EAGLE_PREFIX))  # times its pass on this machine
        return EagleDrafter(head, "EAGLE head", c=c_at_load(target.source, default_dtype(), spec) or 0.0)
    if spec.startswith((DRAFT_EAGLE_TREE_PREFIX, DRAFT_HYBRID_PREFIX)):
        prefix, folder = spec.split(":", 1)
        head = eagle_head(target.source, folder)  # times a chain's pass and a tree level's on this machine
        tree_spec = DRAFT_EAGLE_TREE_PREFIX + folder
        c = c_at_load(target.source, default_dtype(), tree_spec) or 0.0  # a tree level over a target pass
        # the hybrid's head: the same tree, so the same pass
        if spec != tree_spec and (measured := draft_pass(target.source, tree_spec)) is not None:
            record_draft_pass(target.source, spec, *measured)
        curve = cost_curve(target.model)
        tree = EagleDrafter(head, "EAGLE tree", TreeShape(), curve, c)
        return tree if prefix + ":" == DRAFT_EAGLE_TREE_PREFIX else HybridDrafter(tree, curve=curve, c=c)
    if spec == DRAFT_BF16:
        model = reduced_copy(target.source, torch.bfloat16)
        return ModelDrafter(model, "bfloat16 copy", min_confidence, True, _measured_c(target, spec, model))
    if spec == DRAFT_EARLY_EXIT:
        model = early_exit_copy(target.model, EARLY_EXIT_LAYERS)
        name = f"early exit ({EARLY_EXIT_LAYERS} layers)"
        return ModelDrafter(model, name, min_confidence, True, _measured_c(target, spec, model))
    draft = load_model(spec)
    check_same_vocabulary(target, draft)
    return ModelDrafter(draft.model, spec, min_confidence, c=_measured_c(target, spec, draft.model))


def _measured_c(target: LoadedModel, spec: str, model) -> float | None:
    measure_draft_pass(target, spec, model)
    return c_at_load(target.source, default_dtype(), spec)
