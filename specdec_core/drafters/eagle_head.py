"""The EAGLE draft head (Li et al. 2024, arXiv 2401.15077): the model and its file format.

One decoder layer of the target's own architecture (or a few: `draft_layers`). At position j it reads
fc([embedding of token j+1, feature f_j]) and predicts f_{j+1}, the target's last hidden state before its final
norm; the target's frozen norm and lm_head rows turn that into logits. The lm_head is cut to the draft vocabulary,
the N tokens the target emits most often (FR-Spec, arXiv 2502.14856): q is zero elsewhere, still a distribution
over target ids, so the acceptance rule stays exact. Features are divided by a fixed per-dimension scale (from the
training data): a few dimensions of the residual stream are in the thousands and would swamp fc and the loss.

EAGLE-3's fused features (arXiv 2503.01840), with `feature_layers`: a low, a middle and a high layer's outputs side
by side, made one vector by `fuse` (3H -> H); its later drafts read the layer's own output there, a hidden state
of the head's own (no regression loss then).

Saved as safetensors with EAGLE-3's field names where they mean the same (`fc`, `midlayer.*`, `d2t`, `t2d`); the
layer takes EAGLE-1's input, so the files are not claimed to load in EAGLE-3 code. The lm_head rows are not stored:
they are the target's own. training/ writes these files; the app and the bench read them.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import DynamicCache, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from ..errors import ModelLoadError
from ..lean_pass import fuse_layers, is_fused, lean_layer

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
CURVE_NAME = "learning_curve.json"  # written by training/, shown by the app's explainer
AGREEMENT_NAME = "agreement.json"  # written by `bench --agreement --save-beside`, quoted by the app's explainer


# Each layer adds about a target layer's work to every draft token, so a useful head has a few; a config asking for
# more is refused before its layers are allocated (a damaged file could ask for thousands).
MAX_DRAFT_LAYERS = 4
EAGLE1 = "eagle1-llama-decoder-layer"  # reads the target's last layer
EAGLE3_FUSED = "eagle3-fused-features-llama-decoder-layer"  # reads several layers through `fuse`


@dataclass(frozen=True, slots=True)
class HeadConfig:
    """What the head was built for; a target that does not match it is refused."""

    target_model: str  # a name for people ("SmolLM2-135M-Instruct")
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    vocab_size: int
    draft_vocab_size: int
    architecture: str = EAGLE1
    feature_layers: tuple[int, ...] = ()  # the target layers read (from 0), ascending; () = the last (EAGLE-1)
    draft_layers: int = 1  # the head's own decoder layers (EAGLE: one)

    def __post_init__(self) -> None:
        object.__setattr__(self, "feature_layers", tuple(self.feature_layers))  # a JSON list when read from a file

    @classmethod
    def for_target(
        cls,
        target: PreTrainedModel,
        name: str,
        draft_vocab_size: int,
        feature_layers: tuple[int, ...] = (),
        draft_layers: int = 1,
    ) -> HeadConfig:
        c = target.config
        architecture = EAGLE3_FUSED if feature_layers else EAGLE1
        return cls(
            name,
            c.model_type,
            c.hidden_size,
            c.num_hidden_layers,
            c.vocab_size,
            draft_vocab_size,
            architecture,
            tuple(feature_layers),
            draft_layers,
        )

    @property
    def layers(self) -> tuple[int, ...]:
        """The target layers whose outputs the head reads, side by side."""
        return self.feature_layers or (self.num_hidden_layers - 1,)

    @property
    def feature_width(self) -> int:
        return len(self.layers) * self.hidden_size

    def check_target(self, target: PreTrainedModel, where: str) -> None:
        c = target.config
        seen = (c.model_type, c.hidden_size, c.num_hidden_layers, c.vocab_size)
        wanted = (self.model_type, self.hidden_size, self.num_hidden_layers, self.vocab_size)
        if seen != wanted:
            raise ModelLoadError(
                f"The draft head in {where} was made for {self.target_model} "
                f"({self.model_type}, hidden size {self.hidden_size}, {self.num_hidden_layers} layers, "
                f"{self.vocab_size} tokens), not for this target ({seen[0]}, hidden size {seen[1]}, "
                f"{seen[2]} layers, {seen[3]} tokens)."
            )
        self.check_layout(where)
        if not 1 <= self.draft_layers <= MAX_DRAFT_LAYERS:
            raise ModelLoadError(
                f"The draft head in {where} has {self.draft_layers} decoder layers; a head has 1 to {MAX_DRAFT_LAYERS}."
            )

    def check_layout(self, where: str) -> None:
        """The feature layout must be one this code runs: EAGLE-1 on the last layer, or fused distinct layers."""
        layers = self.feature_layers
        fused_ok = (
            len(layers) > 1
            and list(layers) == sorted(set(layers))
            and 0 <= layers[0]
            and layers[-1] < self.num_hidden_layers
        )
        if (self.architecture, bool(layers)) == (EAGLE1, False) or (self.architecture == EAGLE3_FUSED and fused_ok):
            return
        raise ModelLoadError(
            f"The draft head ({where}) has a feature layout this version cannot run ({self.architecture}, "
            f"layers {list(layers) or 'last'}): it reads either the target's last layer ({EAGLE1}) or two or more "
            f"distinct layers in ascending order, each below {self.num_hidden_layers} ({EAGLE3_FUSED})."
        )


class EagleHead(nn.Module):
    """The trainable part (fc, midlayer, upper_layers) plus frozen views of the target (embedding, norm, lm_head
    rows)."""

    def __init__(
        self, target: PreTrainedModel, config: HeadConfig, draft_ids: torch.Tensor, dtype: torch.dtype | None = None
    ) -> None:
        """dtype: what the head computes in (default: the target's); head_variants.py times float32,
        bfloat16 and int8 on the running machine and keeps the fastest."""
        super().__init__()
        dtype = dtype or target.get_input_embeddings().weight.dtype
        draft_ids = torch.unique(draft_ids)  # sorted and distinct: draft id order follows target id order
        hidden = config.hidden_size
        layer_config = copy.deepcopy(target.config)
        layer_config.num_hidden_layers = config.draft_layers
        layer_config._attn_implementation = "sdpa"
        self.config = config
        self.layer_config = layer_config
        # EAGLE-3: the low, middle and high layers' outputs made one vector; EAGLE-1 reads the last as it is
        self.fuse = nn.Linear(config.feature_width, hidden, bias=False) if config.feature_layers else None
        self.fc = nn.Linear(2 * hidden, hidden, bias=True)
        # The first layer keeps EAGLE's published name, so one-layer files are EAGLE's layout; a deeper head's
        # further layers follow it, each with its own entries in the head's cache.
        self.midlayer = LlamaDecoderLayer(layer_config, layer_idx=0)
        self.upper_layers = nn.ModuleList(
            LlamaDecoderLayer(layer_config, layer_idx=i) for i in range(1, config.draft_layers)
        )
        self.rotary = LlamaRotaryEmbedding(layer_config)
        self.register_buffer("feature_scale", torch.ones(config.feature_width))
        # EAGLE-3's reduced-vocabulary convention: target id = draft id + d2t[draft id]; t2d marks kept ids.
        self.register_buffer("d2t", draft_ids - torch.arange(len(draft_ids)))
        t2d = torch.zeros(config.vocab_size, dtype=torch.bool)
        t2d[draft_ids] = True
        self.register_buffer("t2d", t2d)
        # Frozen target parts, referenced (embedding) or copied once in the head's dtype (the final
        # norm, the kept lm_head rows). Kept out of the state dict: they belong to the target.
        frozen = {
            "embed": target.get_input_embeddings(),
            "norm": copy.deepcopy(target.model.norm).to(dtype),
            # in a container, so that kernels that swap modules (int8 quantization) can swap the rows too
            "lm_head": nn.Sequential(_rows_of(target.get_output_embeddings(), draft_ids, dtype)),
            "target_lm_head": target.get_output_embeddings(),
        }
        for part in frozen.values():
            part.requires_grad_(False)
        object.__setattr__(self, "_frozen", frozen)
        self.to(device=target.device, dtype=dtype)

    @property
    def device(self) -> torch.device:
        """The target's device: the head reads the target's embedding there."""
        return self.feature_scale.device

    @property
    def draft_lm_head(self) -> nn.Sequential:
        """The target's lm_head rows of the draft vocabulary (one Linear): the head's own copy, which
        head_variants.py gives the kernel measured fastest here, as it does the head's own linears."""
        return self._frozen["lm_head"]

    @property
    def draft_to_target(self) -> torch.Tensor:
        return torch.arange(len(self.d2t), device=self.d2t.device) + self.d2t  # [N] target id of each draft id

    def input_features(self, real: torch.Tensor) -> torch.Tensor:
        """The target's features [..., F] (the config's layers side by side) as the head reads them [..., H]:
        divided by feature_scale (in float32: a few dimensions are in the thousands), then fused."""
        scaled = (real.float() / self.feature_scale.float()).to(self.feature_scale.dtype)
        return scaled if self.fuse is None else self.fuse(scaled)

    def forward(
        self,
        features: torch.Tensor,  # [B, T, H] input_features of real ones, or the head's own outputs
        tokens: torch.Tensor,  # [B, T] the token after each feature's position
        position_ids: torch.Tensor,  # [B, T]
        cache: DynamicCache,
        attention_mask: torch.Tensor | None,  # [B, 1, T, cached + T] additive, or None for one query
    ) -> torch.Tensor:
        """The head's outputs [B, T, H], in the space of its input: EAGLE-1's predict the target's next
        scaled feature; the fused head's are its own hidden states."""
        embedded = self._frozen["embed"](tokens).to(features.dtype)
        hidden = self.fc(torch.cat([embedded, features], dim=-1))
        rotary = self.rotary(hidden, position_ids)
        if self.projections_stacked:  # served: the target's lean layer (lean_pass.py), one batch row
            cos, sin = (table[:, None] for table in rotary)
            for index, layer in enumerate(self.layers):
                hidden = lean_layer(layer, self.layer_config, hidden, cos, sin, cache, index, attention_mask)
            return hidden
        for layer in self.layers:
            hidden = layer(
                hidden,
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                use_cache=True,
                position_embeddings=rotary,
            )
        return hidden

    @property
    def layers(self) -> tuple[nn.Module, ...]:
        return (self.midlayer, *self.upper_layers)

    @property
    def projections_stacked(self) -> bool:
        """Whether the layers' projections are stacked for serving (stack_projections); such a head is not
        trained or saved."""
        return is_fused(self.midlayer)

    def stack_projections(self) -> EagleHead:
        """Stacks each layer's q/k/v and gate/up projections (lean_pass.fuse_layers) for serving: a draft
        step runs the head's layer 3-4 times, and fewer, larger matrix products without per-call machinery
        make each run cheaper (bench/RESULTS.md, 2026-12-06, Intel Xeon with AMX). Call before the kernels
        are chosen: stacking needs the dense weights."""
        fuse_layers(self.layers)
        return self

    def logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """The head's outputs [..., H] -> logits over the draft vocabulary [..., N], through the scale of the
        highest layer read: for EAGLE-1 that undoes the input's scaling of the last layer; for a fused head
        it is a fixed rescaling its training learned with (training and serving both go through here)."""
        return self._frozen["lm_head"](self._frozen["norm"](predicted * self.feature_scale[-self.config.hidden_size :]))

    def target_logits(self, features: torch.Tensor) -> torch.Tensor:
        """The target's own logits over the draft vocabulary from its real (unscaled) features."""
        return self._frozen["lm_head"](self._frozen["norm"](features))

    def target_argmax(self, features: torch.Tensor) -> torch.Tensor:
        """The target's greedy choice over its full vocabulary from its real features [..., H]."""
        return self._frozen["target_lm_head"](self._frozen["norm"](features)).argmax(-1)

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.layer_config)


def _rows_of(lm_head: nn.Module, ids: torch.Tensor, dtype: torch.dtype) -> nn.Linear:
    weight = lm_head.weight.detach()[ids].to(dtype).clone()
    rows = nn.Linear(weight.shape[1], weight.shape[0], bias=False, dtype=weight.dtype, device=weight.device)
    rows.weight = nn.Parameter(weight, requires_grad=False)
    return rows


def training_runs(curve_file: dict) -> list[dict]:
    """The settings of each run that trained a head, first to last, from its learning_curve.json (CURVE_NAME):
    the runs before it (`earlier_runs`) and its own (`settings`)."""
    return curve_file.get("earlier_runs", []) + ([curve_file["settings"]] if "settings" in curve_file else [])


def save_head(head: EagleHead, folder: Path) -> None:
    """Half-precision safetensors (fc, midlayer, upper_layers, feature_scale, d2t, t2d) plus config.json."""
    if head.projections_stacked:
        raise ValueError(
            "This head's projections are stacked for serving (EagleHead.stack_projections); save the head "
            "as loaded or trained."
        )
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in head.state_dict().items()}
    save_file(tensors, str(folder / WEIGHTS_NAME))
    (folder / CONFIG_NAME).write_text(json.dumps(asdict(head.config), indent=2) + "\n")


def load_head(folder: Path, target: PreTrainedModel, dtype: torch.dtype | None = None) -> EagleHead:
    """A saved head attached to its target (computing in dtype, default the target's), or a
    ModelLoadError that says what is wrong with the file."""
    where = folder.name
    try:
        config = HeadConfig(**json.loads((folder / CONFIG_NAME).read_text()))
    except FileNotFoundError:
        raise ModelLoadError(
            f"The draft head '{where}' is missing: no {CONFIG_NAME}. Train it with `python -m training.train_head`."
        ) from None
    except (json.JSONDecodeError, TypeError) as error:
        raise ModelLoadError(
            f"The draft head '{where}' has an unreadable {CONFIG_NAME} ({type(error).__name__})."
        ) from None
    config.check_target(target, where)
    try:
        tensors = load_file(str(folder / WEIGHTS_NAME))
    except FileNotFoundError:
        raise ModelLoadError(f"The draft head '{where}' is missing its weights ({WEIGHTS_NAME}).") from None
    except (SafetensorError, OSError, ValueError) as error:
        raise ModelLoadError(
            f"The draft head '{where}' has a damaged weights file ({WEIGHTS_NAME}: {error})."
        ) from None
    if "d2t" not in tensors or tensors["d2t"].shape != (config.draft_vocab_size,):
        raise ModelLoadError(
            f"The draft head '{where}' has no draft-to-target id map of {config.draft_vocab_size} entries."
        )
    scale = tensors.get("feature_scale")
    if (
        scale is None
        or scale.shape != (config.feature_width,)
        or ("fuse.weight" in tensors) != bool(config.feature_layers)
    ):
        raise ModelLoadError(
            f"The draft head '{where}' does not match its feature layout: its config reads layers "
            f"{list(config.layers)} ({config.feature_width} values a token, "
            f"{'fused' if config.feature_layers else 'no fusion'}), "
            f"its weights were made for {'?' if scale is None else scale.shape[0]} values a token "
            f"({'fused' if 'fuse.weight' in tensors else 'no fusion'}). Use the config.json saved with these weights."
        )
    draft_ids = torch.arange(config.draft_vocab_size) + tensors["d2t"]
    if int(draft_ids.min()) < 0 or int(draft_ids.max()) >= config.vocab_size:
        raise ModelLoadError(
            f"The draft head '{where}' maps draft ids outside the target's {config.vocab_size} tokens."
        )
    head = EagleHead(target, config, draft_ids, dtype)
    dtype = head.feature_scale.dtype
    try:
        head.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()})
    except RuntimeError as error:
        raise ModelLoadError(
            f"The draft head '{where}' does not fit its own config: {str(error).splitlines()[0]}"
        ) from None
    return head.eval()
