"""Compiled target passes: the static pass (static_pass.py) compiled ahead of time by AOTInductor, one package per
width bucket, kept on disk per machine (artefacts.py), loaded into the serving process and attached to the model
they were built from. A CachedModel whose model has them runs each pass through the narrowest bucket that holds it
(padding the rest), and the lean pass where none does: a context past the static length, a wider pass, feature
layers the packages do not output.

Why compiled: the lean pass runs 30 layers of small eager ops and oneDNN's matrix-vector products; inductor's C++
GEMM template over weights packed at compile time reads them near the memory bandwidth (bench/RESULTS.md:
2026-12-07, AMD EPYC AVX2, 72% of the bound against the lean pass's 37%). Why ahead of time and per bucket: a
compile takes minutes per shape on two cores, and torch.compile's own cache cannot keep graphs holding packed
weights across processes; an AOTInductor package loads in about two seconds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedModel

from . import static_pass
from .artefacts import artefact_path, artefact_problem, cached_artefact
from .static_pass import StaticPass, head_dim, static_inputs

log = logging.getLogger(__name__)

ARTEFACT = "static-pass"
# The widths compiled: a pass over n tokens runs in the narrowest bucket >= n. One token for plain decoding and
# drafting copies; the rest for verification (k + 1 tokens of a chain, a tree's nodes).
BUCKETS = (1, 3, 5, 9, 17)
# Positions the static cache holds: attention reads all of them every pass (masked), so a longer buffer costs
# every pass; contexts past it run the lean pass.
LENGTH = 1024
INDUCTOR_CONFIGS = {"freezing": True, "max_autotune": True}  # freezing folds the weights; the GEMM template packs them


def model_fingerprint(model: PreTrainedModel) -> str:
    """What the packages of a model are built from, readable both from the stock copy that compiles them and from
    the served copy whose dense linears are released: the architecture, the embedding's bytes and every norm's. A
    model rewritten in place under the same source with those unchanged (a merged adapter) is not told apart: delete
    its packages (the cache dir's compiled/) after such a change."""
    config = model.config
    shape = [
        config.model_type,
        config.vocab_size,
        config.hidden_size,
        config.intermediate_size,
        config.num_hidden_layers,
        config.num_attention_heads,
        config.num_key_value_heads,
        getattr(config, "rope_parameters", None) or getattr(config, "rope_theta", None),
        config.rms_norm_eps,
    ]
    digest = hashlib.sha256(json.dumps(shape, default=str).encode())
    read = [model.get_input_embeddings().weight] + [p for name, p in model.named_parameters() if "norm" in name]
    for weight in read:
        digest.update(weight.detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


# The static pass's code is part of what a package was built from: a package of an older pass is never loaded.
STATIC_PASS_CODE = hashlib.sha256(Path(static_pass.__file__).read_bytes()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class PassPlan:
    """What to compile for one model: its fingerprint, the width buckets, the static length and the feature layers
    the packages output besides the logits (those the model's EAGLE head reads)."""

    fingerprint: str
    widths: tuple[int, ...] = BUCKETS
    length: int = LENGTH
    feature_layers: tuple[int, ...] = ()
    source: str = ""  # where the model comes from (sources.py), beside its fingerprint

    def identity(self, width: int) -> dict:
        return {
            "model": self.fingerprint,
            "source": self.source,
            "pass": STATIC_PASS_CODE,
            "width": width,
            "length": self.length,
            "feature_layers": list(self.feature_layers),
            "inductor": INDUCTOR_CONFIGS,
        }

    def bucket(self, tokens: int) -> int | None:
        """The narrowest width holding a pass over `tokens`."""
        return min((w for w in self.widths if w >= tokens), default=None)

    def path(self, width: int) -> Path:
        return artefact_path(ARTEFACT, self.identity(width))

    def missing(self) -> list[int]:
        """The widths with no whole package built on this machine."""
        return [w for w in self.widths if artefact_problem(self.path(w), self.identity(w)) is not None]


def kv_buffers(model: PreTrainedModel, length: int, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """Zeroed keys and values for every layer in turn, [1, kv_heads, length, head_dim] each."""
    config = model.config
    shape = (1, config.num_key_value_heads, length, head_dim(config))
    return [torch.zeros(shape, dtype=dtype) for _ in range(2 * config.num_hidden_layers)]


def build_packages(stock: PreTrainedModel, plan: PassPlan, report: Callable[[str], None] = log.info) -> None:
    """Compiles every missing width of plan from stock (a float32 copy with dense nn.Linear: models.load_stock),
    each into the artefact cache. Minutes per width on two cores."""
    module = StaticPass(stock, plan.feature_layers).eval()
    for width in plan.missing():

        def build(path: Path, width: int = width) -> None:
            with torch.no_grad():  # not inference_mode: freezing folds parameters
                started = time.perf_counter()
                example = (*static_inputs([0] * width, 1, width, plan.length), kv_buffers(stock, plan.length))
                program = torch.export.export(module, example, strict=False)
                # a copy: the call adds its own keys to the dict it is given
                torch._inductor.aoti_compile_and_package(
                    program, package_path=str(path), inductor_configs=dict(INDUCTOR_CONFIGS)
                )
            report(f"compiled the {width}-token pass in {time.perf_counter() - started:.0f} s")

        cached_artefact(ARTEFACT, plan.identity(width), build)


@dataclass(frozen=True)
class CompiledPasses:
    """Loaded packages by width, for the model of plan; used_for: the pass widths (tokens) they run, those where
    they measured faster than the lean pass (compile_jobs.bring_into_use); None: every width they hold."""

    plan: PassPlan
    packages: dict[int, Callable] = field(hash=False)
    used_for: frozenset[int] | None = None

    def width_for(self, tokens: int, cached: int) -> int | None:
        """The package that runs a pass over `tokens` behind `cached`, or None: the lean pass runs (a width the
        compiled passes are not used for, or a context past the static length)."""
        if self.used_for is not None and tokens not in self.used_for:
            return None
        width = self.plan.bucket(tokens)
        return width if width is not None and cached + width <= self.plan.length else None

    def run(
        self,
        kv: list[torch.Tensor],
        token_ids: list[int],
        cached: int,
        parents: tuple[int, ...] | None,
        width: int,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One pass through the width's package: (logits [len(token_ids), V], features [len(token_ids), F] or
        None), its keys and values written into kv at positions cached.. (and padding past them)."""
        n = len(token_ids)
        outputs = self.packages[width](*static_inputs(token_ids, cached, width, self.plan.length, parents), kv)
        features = outputs[1][0, :n] if len(outputs) > 1 else None
        return outputs[0][0, :n], features


def load_packages(plan: PassPlan) -> CompiledPasses | None:
    """The plan's packages, each checked against its manifest; None unless every width is whole here."""
    if plan.missing():
        return None
    return CompiledPasses(plan, {w: torch._inductor.aoti_load_package(str(plan.path(w))) for w in plan.widths})


# loaded model -> its compiled passes; a CachedModel reads them when it is made (kv_cache.py)
_attached: weakref.WeakKeyDictionary[PreTrainedModel, CompiledPasses] = weakref.WeakKeyDictionary()


def attach(model: PreTrainedModel, passes: CompiledPasses) -> None:
    _attached[model] = passes


def detach(model: PreTrainedModel) -> None:
    """The lean pass again for runs started from now on (the bench compares both paths in one process)."""
    _attached.pop(model, None)


def compiled_passes(model: PreTrainedModel) -> CompiledPasses | None:
    return _attached.get(model)
