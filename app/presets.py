"""The model pairs the app offers, their drafters' labels, and the default target."""

from __future__ import annotations

from dataclasses import dataclass

from specdec_core.drafters import (
    DRAFT_BF16,
    DRAFT_EAGLE,
    DRAFT_EAGLE_TREE,
    DRAFT_EARLY_EXIT,
    DRAFT_HYBRID,
    DRAFT_NGRAM,
    EARLY_EXIT_LAYERS,
)
from specdec_core.sources import EMBEDDED_ID, embedded_installed


@dataclass(frozen=True, slots=True)
class Preset:
    label: str
    target: str
    drafts: tuple[str, ...]  # the first is the default


PRESETS: tuple[Preset, ...] = (
    Preset(
        "SmolLM2-135M-Instruct (embedded, offline)", EMBEDDED_ID,
        # The default: on the realistic held-out set the best mean speedup with no category below plain decoding
        # (python -m bench --suite realistic; README, "Draft trees and the hybrid")
        (DRAFT_HYBRID, DRAFT_EAGLE, DRAFT_EAGLE_TREE, DRAFT_BF16, DRAFT_NGRAM, DRAFT_EARLY_EXIT),
    ),
    Preset(
        "SmolLM2-360M-Instruct (hub)",
        "HuggingFaceTB/SmolLM2-360M-Instruct",
        ("HuggingFaceTB/SmolLM2-135M-Instruct", DRAFT_NGRAM),
    ),
    Preset(
        "SmolLM2-1.7B-Instruct (hub)",
        "HuggingFaceTB/SmolLM2-1.7B-Instruct",
        ("HuggingFaceTB/SmolLM2-135M-Instruct", DRAFT_NGRAM),
    ),
    Preset("Qwen2.5-1.5B-Instruct (hub)", "Qwen/Qwen2.5-1.5B-Instruct", ("Qwen/Qwen2.5-0.5B-Instruct", DRAFT_NGRAM)),
)

DRAFT_LABELS = {  # the app adds each drafter's cost c as measured on the machine it runs on
    DRAFT_EAGLE: "EAGLE draft head trained here (1 layer), chain",
    DRAFT_EAGLE_TREE: "EAGLE head, tree (EAGLE-2; its size from this machine's costs)",
    DRAFT_HYBRID: "n-gram lookup + EAGLE tree in one tree",
    DRAFT_BF16: "bfloat16 copy of the target (agrees almost always)",
    DRAFT_NGRAM: "n-gram prompt lookup (model-free, c = 0)",
    DRAFT_EARLY_EXIT: f"early exit: first {EARLY_EXIT_LAYERS} layers of the target (a bad draft)",
}


def preset_for(target: str) -> Preset | None:
    """The preset of a target (its drafters, its label), or None for a model typed in."""
    return next((p for p in PRESETS if p.target == target), None)


def default_target() -> str:
    """The embedded model where its wheel is installed (offline use), else the first hub preset (Spaces)."""
    return EMBEDDED_ID if embedded_installed() else PRESETS[1].target
