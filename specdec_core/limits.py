"""What one run may ask for, defined once: the engine refuses more, the app shows the same numbers.

The two limits protect a shared 2-vCPU Space (generation time grows with the tokens asked for, prefill
time with the prompt's length); the environment overrides them for a private machine. A model's own
context window bounds every run as well.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# Drafts up to MEASURED_DRAFT_TOKENS are priced from passes measured on the machine (tuning.py's curve covers
# 1..MEASURED_DRAFT_TOKENS + 1 tokens); the adaptive k, the trees and the app's k stay within it. A fixed k asked
# through the API may go to MAX_DRAFT_TOKENS: wider passes are priced along the mean step of the curve's upper half.
MEASURED_DRAFT_TOKENS = 16
MAX_DRAFT_TOKENS = 32
MAX_NEW_TOKENS = int(os.environ.get("SPECDEC_MAX_NEW_TOKENS", "256"))
# Long enough for a Spec-Bench summarization article (~5,200 characters, about 1,300 tokens).
MAX_PROMPT_CHARS = int(os.environ.get("SPECDEC_MAX_PROMPT_CHARS", "8000"))


def context_window(model: PreTrainedModel) -> int:
    """The most positions the model reads: a prompt and its answer together."""
    return int(getattr(model.config, "max_position_embeddings", 0) or 2048)
