"""Drafters: the protocol and the Draft (base), prompt lookup (ngram), causal LMs and the target's self-copies
(model_draft), the EAGLE head (eagle_head: the model and its file format; eagle: its chain and tree drafter;
head_variants: how it runs on this machine), lookup and head in one tree (hybrid), and make_drafter (factory).
Tree geometry is specdec_core.tree's.
"""

from .base import Draft, Drafter
from .eagle import EagleDrafter, TreeShape
from .eagle_head import EagleHead
from .factory import (
    DRAFT_BF16,
    DRAFT_EAGLE,
    DRAFT_EAGLE_TREE,
    DRAFT_EARLY_EXIT,
    DRAFT_HYBRID,
    DRAFT_NGRAM,
    make_drafter,
)
from .hybrid import HybridDrafter
from .model_draft import EARLY_EXIT_LAYERS, ModelDrafter
from .ngram import NgramDrafter

__all__ = [
    "DRAFT_BF16",
    "DRAFT_EAGLE",
    "DRAFT_EAGLE_TREE",
    "DRAFT_EARLY_EXIT",
    "DRAFT_HYBRID",
    "DRAFT_NGRAM",
    "EARLY_EXIT_LAYERS",
    "Draft",
    "Drafter",
    "EagleDrafter",
    "EagleHead",
    "HybridDrafter",
    "ModelDrafter",
    "NgramDrafter",
    "TreeShape",
    "make_drafter",
]
