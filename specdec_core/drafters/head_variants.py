"""The EAGLE head as it runs here: in the precision and with the kernels measured fastest on this
machine (tuning.choose_fastest), attached to its loaded target and kept in the model cache."""

from __future__ import annotations

import functools
import re
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import PreTrainedModel

from ..config import SamplingConfig
from ..costs import CONTEXT_TOKENS
from ..cpu_kernels import (
    INT8,
    PACKED,
    STOCK,
    KernelPlan,
    onednn_supports,
    quantize_linears_int8,
    release_dense_weights,
    set_kernel_plan,
    speed_up_linears,
)
from ..errors import ModelLoadError
from ..measurements import cached, median_seconds
from ..models import MODELS, load_model
from ..sampling import Sampler
from ..tuning import choose_fastest, record_draft_pass
from .eagle import EagleDrafter, TreeShape
from .eagle_head import EagleHead, load_head

DRAFT_TOKENS = 4  # a timed draft: k = 4, the head's usual length
HEADS_DIR = Path(__file__).resolve().parents[2] / "assets"  # "eagle:<folder in assets/>": a head trained by training/
DRAFT_EAGLE_PREFIX = "eagle:"
DRAFT_EAGLE_TREE_PREFIX = "eagle-tree:"
DRAFT_HYBRID_PREFIX = "hybrid:"


def eagle_head(source: str, folder_name: str) -> EagleHead:
    """A trained head from assets/<folder_name>, attached to the target it was made for."""
    if not re.fullmatch(r"[\w.\-]+", folder_name):
        raise ModelLoadError(f"'{folder_name}' is not a draft head name (a folder name in assets/).")
    target = load_model(source).model
    size = 32 * 2**20  # one layer plus 16k lm_head rows, bfloat16, packed: ~27 MB for SmolLM2-135M
    return MODELS.get(
        ("head", source, folder_name), folder_name, size, lambda: fast_head(HEADS_DIR / folder_name, target, source)
    )


def fast_head(folder: Path, target: PreTrainedModel, target_source: str = "") -> EagleHead:
    """The head with the precision and kernels measured fastest on this machine (tuning.py): bfloat16
    through oneDNN where the CPU has AVX-512 BF16, int8 or float32 elsewhere. Dense copies released."""
    if target.device.type != "cpu":
        return load_head(folder, target)
    builders = {name: functools.partial(head_variant, folder, target, name) for name in head_variants()}
    # a missing or broken head fails in load_head, with its message, when the first candidate is built
    identity = {
        "head": folder.name,
        "files": [f.stat().st_size for f in sorted(folder.glob("*")) if f.is_file()],
        "target": target_source,
        "layers": "stacked projections, lean layer",
    }
    head, choice = choose_fastest("EAGLE head", identity, builders, head_draft_seconds)
    record_draft_pass(target_source, DRAFT_EAGLE_PREFIX + folder.name, choice.seconds[choice.chosen], choice.chosen)
    # A tree level runs the layer and the lm_head rows over several nodes, plus the tree's bookkeeping:
    # the tree and the hybrid price their passes at this, not at a chain's (1.4x a chain pass on an AVX-512 EPYC)
    levels, _ = cached(
        "EAGLE-tree-level",
        {**identity, "variant": choice.chosen, "shape": asdict(TreeShape())},
        lambda: {"seconds": head_draft_seconds(head, TreeShape())},
    )
    record_draft_pass(target_source, DRAFT_EAGLE_TREE_PREFIX + folder.name, levels["seconds"], choice.chosen)
    return head


# name -> (dtype the head computes in, kernel of its linears); bfloat16 through oneDNN needs AVX-512 BF16
HEAD_VARIANTS: dict[str, tuple[torch.dtype, str]] = {
    "float32 packed": (torch.float32, PACKED),
    "float32 stock": (torch.float32, STOCK),
    "bfloat16 packed": (torch.bfloat16, PACKED),
    "bfloat16 stock": (torch.bfloat16, STOCK),
    "int8 dynamic": (torch.float32, INT8),
}


def head_variants() -> list[str]:
    """The head variants this CPU can run fast enough to be worth timing."""
    return [name for name, (dtype, kernel) in HEAD_VARIANTS.items() if kernel != PACKED or onednn_supports(dtype)]


def head_variant(folder: Path, target: PreTrainedModel, name: str) -> EagleHead:
    dtype, kernel = HEAD_VARIANTS[name]
    head = load_head(folder, target, dtype).stack_projections()
    for part in (head, head.draft_lm_head):
        if kernel == INT8:
            quantize_linears_int8(part)
        else:
            speed_up_linears(part)
            set_kernel_plan(part, KernelPlan(kernel, kernel))
            release_dense_weights(part)
    return head


def head_draft_seconds(head: EagleHead, tree: TreeShape | None = None) -> float:
    """Median seconds of one draft pass of an EAGLE head (a DRAFT_TOKENS-token draft, divided). tree: a
    TreeShape to time a tree's levels instead (several nodes a pass, and the tree's bookkeeping)."""
    drafter = EagleDrafter(head, tree=tree)
    features = torch.randn(CONTEXT_TOKENS + 64, head.config.feature_width, generator=torch.Generator().manual_seed(0))
    vocab = head.config.vocab_size
    context = [i % vocab for i in range(CONTEXT_TOKENS)]
    sampler = Sampler(SamplingConfig())

    def step() -> None:
        """As in a run where the last draft was rejected: one new verified token, then a k-token draft."""
        context.append((context[-1] + 1) % vocab)
        newest = len(context) - 2  # the target has read up to here; the newest token comes with the next pass
        drafter.observe_features(newest, features[newest : newest + 1])
        drafter.propose(context, DRAFT_TOKENS, sampler)

    drafter.observe_features(0, features[: CONTEXT_TOKENS - 1])
    return median_seconds(step, repeats=9) / DRAFT_TOKENS
