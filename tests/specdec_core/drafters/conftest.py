"""Helpers shared by the drafters' tests: random EAGLE heads on tiny targets."""

from __future__ import annotations

import torch

from specdec_core.config import SamplingConfig
from specdec_core.drafters.eagle_head import EagleHead, HeadConfig

VOCAB = 32
SMALL_VOCAB = 8
SAMPLING = SamplingConfig(temperature=1.3, top_p=0.95, top_k=6)


def random_head(
    target,
    draft_ids: list[int],
    seed: int = 0,
    sharpness: float = 4.0,
    layers: tuple[int, ...] = (),
    draft_layers: int = 1,
) -> EagleHead:
    """layers: () reads the last layer (EAGLE-1); several fuse their outputs (EAGLE-3). draft_layers: the head's own."""
    torch.manual_seed(seed)
    config = HeadConfig.for_target(target, "tiny", len(draft_ids), layers, draft_layers)
    head = EagleHead(target, config, torch.tensor(draft_ids))
    with torch.no_grad():  # a random head with opinions: q far from uniform, so rejections happen
        head.fc.weight.mul_(sharpness)
    return head.eval()
