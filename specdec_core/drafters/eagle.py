"""An EAGLE draft head (Li et al. 2024, arXiv 2401.15077): a learned draft that reads the target's features.

The head is one decoder layer of the target's own architecture (transformers' LlamaDecoderLayer
with the target's config), or a few stacked (`draft_layers` in its config). At position j it
reads fc([embedding of token j+1, feature f_j]) and predicts f_{j+1}, the target's last hidden state
(before its final norm); the target's own frozen final norm and lm_head turn that prediction into
logits. The lm_head is cut to the draft vocabulary, the N tokens the target emits most often
(FR-Spec, arXiv 2502.14856), because its cost grows with the rows it scores: q is then zero outside
the draft vocabulary, still a proper distribution over target ids, so the acceptance rule stays exact.

Drafting k tokens runs the layers k times on the head's own KV cache: the first pass reads the
target's real features, the next ones the head's own predicted feature (EAGLE's chain). The
engine hands the head the target's features after every target pass (observe_features), so
entries computed from predictions are replaced by real ones once the target has verified them.

Saved as safetensors with EAGLE-3's field names where they mean the same thing (`fc`, `midlayer.*`,
and the draft-to-target offsets `d2t` and target mask `t2d` of its reduced vocabulary). The layer
here takes EAGLE-1's input (one hidden-size vector), not EAGLE-3's, so these files are not
claimed to load in EAGLE-3 code. The lm_head rows are not stored: they are the target's own.

Features are divided by a fixed per-dimension scale (measured on the training data) before the
head sees them: the target's residual stream has a few dimensions in the thousands, which would
swamp both fc and the regression loss.

EAGLE-3's fused features (Li et al. 2025, arXiv 2503.01840), with `feature_layers` in the config: the
head reads the outputs of a low, a middle and a high layer side by side, and `fuse` (one linear map,
3H -> H) makes them the one vector the layer takes. Its drafts after the first read the layer's own
output in that place, so the output is a hidden state of the head's own, not a prediction of the
target's last layer (no regression loss then): the target's frozen norm and lm_head rows read it.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import DynamicCache, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from ..errors import ModelLoadError
from ..kv_cache import CachedModel, with_room
from ..lean_pass import fuse_layers, is_fused, lean_layer
from ..limits import MEASURED_DRAFT_TOKENS
from ..sampling import Sampler
from ..tuning import CostCurve
from .base import Draft
from .tree import Beside, chain, choose_size, depths, path_to, reindexed

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
    def for_target(cls, target: PreTrainedModel, name: str, draft_vocab_size: int, feature_layers: tuple[int, ...] = (),
                   draft_layers: int = 1) -> HeadConfig:
        c = target.config
        architecture = EAGLE3_FUSED if feature_layers else EAGLE1
        return cls(name, c.model_type, c.hidden_size, c.num_hidden_layers, c.vocab_size, draft_vocab_size, architecture,
                   tuple(feature_layers), draft_layers)

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
            raise ModelLoadError(f"The draft head in {where} has {self.draft_layers} decoder layers; a head has 1 to {MAX_DRAFT_LAYERS}.")

    def check_layout(self, where: str) -> None:
        """The feature layout must be one this code runs: EAGLE-1 on the last layer, or fused distinct layers."""
        layers = self.feature_layers
        fused_ok = len(layers) > 1 and list(layers) == sorted(set(layers)) and 0 <= layers[0] and layers[-1] < self.num_hidden_layers
        if (self.architecture, bool(layers)) == (EAGLE1, False) or (self.architecture == EAGLE3_FUSED and fused_ok):
            return
        raise ModelLoadError(
            f"The draft head ({where}) has a feature layout this version cannot run ({self.architecture}, "
            f"layers {list(layers) or 'last'}): it reads either the target's last layer ({EAGLE1}) or two or more "
            f"distinct layers in ascending order, each below {self.num_hidden_layers} ({EAGLE3_FUSED})."
        )


class EagleHead(nn.Module):
    """The trainable part (fc, midlayer, upper_layers) plus frozen views of the target (embedding, norm, lm_head rows)."""

    def __init__(self, target: PreTrainedModel, config: HeadConfig, draft_ids: torch.Tensor, dtype: torch.dtype | None = None) -> None:
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
        self.upper_layers = nn.ModuleList(LlamaDecoderLayer(layer_config, layer_idx=i) for i in range(1, config.draft_layers))
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
            hidden = layer(hidden, attention_mask=attention_mask, position_ids=position_ids, cache=cache, use_cache=True,
                           position_embeddings=rotary)
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
        step runs the head's layer 3-4 times, and fewer, larger matrix products and no per-call machinery
        took 0.9 ms off a depth-3 tree's 8.5 ms draft on a 2-core Intel Xeon (int8 head). Before the
        kernels are chosen: they need the dense weights."""
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


# ---- files ----------------------------------------------------------------------------------------


def training_runs(curve_file: dict) -> list[dict]:
    """The settings of each run that trained a head, first to last, from its learning_curve.json (CURVE_NAME):
    the runs before it (`earlier_runs`) and its own (`settings`)."""
    return curve_file.get("earlier_runs", []) + ([curve_file["settings"]] if "settings" in curve_file else [])


def save_head(head: EagleHead, folder: Path) -> None:
    """Half-precision safetensors (fc, midlayer, upper_layers, feature_scale, d2t, t2d) plus config.json."""
    if head.projections_stacked:
        raise ValueError("This head's projections are stacked for serving (EagleHead.stack_projections); save the head "
                         "as loaded or trained.")
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
        raise ModelLoadError(f"The draft head '{where}' is missing: no {CONFIG_NAME}. Train it with `python -m training.train_head`.") from None
    except (json.JSONDecodeError, TypeError) as error:
        raise ModelLoadError(f"The draft head '{where}' has an unreadable {CONFIG_NAME} ({type(error).__name__}).") from None
    config.check_target(target, where)
    try:
        tensors = load_file(str(folder / WEIGHTS_NAME))
    except FileNotFoundError:
        raise ModelLoadError(f"The draft head '{where}' is missing its weights ({WEIGHTS_NAME}).") from None
    except (SafetensorError, OSError, ValueError) as error:
        raise ModelLoadError(f"The draft head '{where}' has a damaged weights file ({WEIGHTS_NAME}: {error}).") from None
    if "d2t" not in tensors or tensors["d2t"].shape != (config.draft_vocab_size,):
        raise ModelLoadError(f"The draft head '{where}' has no draft-to-target id map of {config.draft_vocab_size} entries.")
    scale = tensors.get("feature_scale")
    if scale is None or scale.shape != (config.feature_width,) or ("fuse.weight" in tensors) != bool(config.feature_layers):
        raise ModelLoadError(
            f"The draft head '{where}' does not match its feature layout: its config reads layers "
            f"{list(config.layers)} ({config.feature_width} values a token, {'fused' if config.feature_layers else 'no fusion'}), "
            f"its weights were made for {'?' if scale is None else scale.shape[0]} values a token "
            f"({'fused' if 'fuse.weight' in tensors else 'no fusion'}). Use the config.json saved with these weights."
        )
    draft_ids = torch.arange(config.draft_vocab_size) + tensors["d2t"]
    if int(draft_ids.min()) < 0 or int(draft_ids.max()) >= config.vocab_size:
        raise ModelLoadError(f"The draft head '{where}' maps draft ids outside the target's {config.vocab_size} tokens.")
    head = EagleHead(target, config, draft_ids, dtype)
    dtype = head.feature_scale.dtype
    try:
        head.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()})
    except RuntimeError as error:
        raise ModelLoadError(f"The draft head '{where}' does not fit its own config: {str(error).splitlines()[0]}") from None
    return head.eval()


# ---- the drafter ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TreeShape:
    """An EAGLE-2 draft tree: `width` candidates per expanded node and `width` nodes expanded per level,
    over the draft length k levels; tree.choose_size then keeps at most `longest` of the best nodes."""

    width: int = 3
    longest: int = MEASURED_DRAFT_TOKENS


class EagleDrafter:
    """Drafts with an EagleHead, the first pass from the target's real features: a chain of k head
    passes, or (with a TreeShape) an EAGLE-2 tree k levels deep, one head pass per level."""

    def __init__(self, head: EagleHead, name: str = "EAGLE head", tree: TreeShape | None = None,
                 curve: CostCurve | None = None, pass_cost: float = 0.0) -> None:
        """curve and pass_cost (c): this machine's, measured at load (tuning.py); they size the tree."""
        self.name = name
        self.head = head
        self.tree = tree
        self._curve = curve
        self._pass_cost = pass_cost
        self._cache = head.new_cache()
        self._real_entries = 0  # head cache entries computed from real target features
        # The features as the head reads them, by position, in a buffer with room to grow: concatenating copied
        # every position on each step (0.3-0.5 ms behind 1,500 tokens, ~1% of a step there).
        self._features = with_room(torch.empty(0, head.config.hidden_size, dtype=head.feature_scale.dtype, device=head.device), 0, 1, dim=0)
        self._draft_to_target = head.draft_to_target.cpu()

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.head.config.layers

    def begin(self, target: CachedModel) -> None:
        """Nothing to adopt: the head builds its cache from the target's features of the prompt."""

    def observe_features(self, start: int, features: torch.Tensor) -> None:
        """The target's features [n, F] (feature_layers side by side) for positions start..start+n-1 of its
        latest pass, kept as the head reads them."""
        with torch.inference_mode():
            read = self.head.input_features(features.to(self.head.device))
            end = start + len(read)
            self._features = with_room(self._features, start, end, dim=0)
            self._features[start:end] = read

    @torch.inference_mode()
    def propose(self, context: list[int], k: int, sampler: Sampler, beside: Beside = Beside()) -> Draft:
        """beside: nodes verified in the same pass outside this draft (the hybrid's lookup branch): a tree is sized
        with them."""
        started = time.perf_counter()
        # Entry j reads (feature of position j, token j+1). The target has read positions up to
        # len(context) - 2 (the newest token is fed with the next verification), so real entries
        # run to there; the last of them predicts the feature from which the first draft comes.
        real_end = len(context) - 1
        # KV rollback: drop the entries the last draft computed from predicted features.
        extra = self._cache.get_seq_length() - self._real_entries
        if extra > 0:
            self._cache.crop(-extra)
        start = self._real_entries
        positions = torch.arange(start, real_end)
        predicted = self._run(self._features[start:real_end], context[start + 1 : real_end + 1], positions, causal_mask(real_end - start, start))[-1:]
        self._real_entries = real_end
        draft = self._chain(predicted, real_end, k, sampler) if self.tree is None else self._tree(predicted, real_end, k, sampler, beside)
        return Draft(*draft, seconds=time.perf_counter() - started)

    def observe(self, accepted_count: int) -> None:
        """Nothing here: the verified positions' real features arrive through observe_features."""

    def _chain(self, predicted: torch.Tensor, real_end: int, k: int, sampler: Sampler) -> tuple:
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(k):
            if i:
                predicted = self._run(predicted, [tokens[-1]], torch.tensor([real_end + i - 1]), None)
            q = self._q(predicted, sampler)[0]  # [V]
            tokens.append(sampler.pick(q))
            rows.append(q)
        probs = torch.stack(rows)
        return tuple(tokens), chain(k), probs, probs[torch.arange(k), tokens], k

    def _tree(self, predicted: torch.Tensor, real_end: int, depth: int, sampler: Sampler, beside: Beside) -> tuple:
        """EAGLE-2: expand the `width` best nodes of each level (score: the product of draft
        probabilities along the path), one head pass per level, then keep the best nodes overall."""
        width = self.tree.width
        tokens: list[int] = []
        parents: list[int] = []
        log_scores: list[float] = []
        confidence: list[float] = []
        head_entry: dict[int, int] = {}  # node -> its entry in the head cache (expanded nodes only)

        def add_children(nodes: list[int], predicted: torch.Tensor) -> None:
            """The `width` likeliest children of each node (-1: the root) from its head output [len(nodes), H]."""
            top = self._tree_q(predicted, sampler).topk(width, dim=-1)
            for node, probs, ids in zip(nodes, top.values.tolist(), self._draft_to_target[top.indices].tolist()):
                score = log_scores[node] if node >= 0 else 0.0
                for prob, token in zip(probs, ids):
                    if prob > 0:  # a warper (top-k, top-p) may leave fewer than `width` tokens
                        tokens.append(token), parents.append(node), confidence.append(prob)
                        log_scores.append(score + math.log(prob))

        add_children([-1], predicted)
        frontier = list(range(len(tokens)))
        node_feature = {-1: predicted[0]}
        for level in range(1, depth):
            cached = self._cache.get_seq_length()
            mask = torch.zeros(len(frontier), cached + len(frontier), dtype=torch.bool)
            mask[:, : self._real_entries] = True
            for row, node in enumerate(frontier):
                for ancestor in path_to(tuple(parents), parents[node]):
                    mask[row, head_entry[ancestor]] = True
                mask[row, cached + row] = True
                head_entry[node] = cached + row
            features = torch.stack([node_feature[parents[node]] for node in frontier])
            positions = torch.full((len(frontier),), real_end + level - 1)
            out = self._run(features, [tokens[node] for node in frontier], positions, mask)
            node_feature.update(zip(frontier, out))
            first_new = len(tokens)
            add_children(frontier, out)
            new = range(first_new, len(tokens))
            frontier = sorted(new, key=lambda n: -log_scores[n])[:width]
        return self._best_nodes(tokens, parents, log_scores, confidence, passes=depth, context=real_end + 1, beside=beside)

    def _best_nodes(self, tokens, parents, log_scores, confidence, passes: int, context: int, beside: Beside) -> tuple:
        """The nodes worth verifying on this machine behind `context` tokens (tree.choose_size), parents first."""
        # Best first; a child never outscores its parent, and depth breaks ties, so any prefix is a tree.
        depth = depths(tuple(parents))
        ranked = sorted(range(len(tokens)), key=lambda n: (-log_scores[n], depth[n]))
        scores = [math.exp(log_scores[n]) for n in ranked]
        costs = None if self._curve is None else self._curve.step_costs(context, self._pass_cost)
        count = choose_size(scores, costs, passes, self.tree.longest, beside)
        kept = sorted(ranked[:count], key=lambda n: (depth[n], n))
        return (tuple(tokens[n] for n in kept), reindexed(parents, kept), None, torch.tensor([confidence[n] for n in kept]), passes)

    def _q(self, predicted: torch.Tensor, sampler: Sampler) -> torch.Tensor:
        """The draft distribution [n, V] over the target's ids from predicted features [n, H]."""
        return sampler.probs(self._full_vocab(self.head.logits(predicted)))

    def _tree_q(self, predicted: torch.Tensor, sampler: Sampler) -> torch.Tensor:
        """The same distribution over the draft vocabulary only [n, N] (index i: target id draft_to_target[i]).
        A tree keeps no draft rows (its children are chosen, not drawn: q is one-hot for the rule), so it ranks
        here: the same probabilities as _q's at the draft ids (q is zero elsewhere, and the warpers keep the
        same tokens), at a third of the softmax and top-k (1.1 of 8.5 ms a depth-3 tree on a 2-core Xeon)."""
        return sampler.probs(self.head.logits(predicted).float().cpu())

    def _run(self, features: torch.Tensor, tokens: list[int], positions: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Appends len(tokens) entries at the given positions to the head cache; their predictions [n, H].
        mask: [n, cached + n] bool (True = attend), or None for one entry that sees everything."""
        device = self.head.device
        additive = None if mask is None else additive_mask(mask, features.dtype).to(device)
        ids = torch.tensor([tokens], device=device)
        out = self.head(features[None], ids, positions[None].to(device), self._cache, additive)
        return out[0]

    def _full_vocab(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [n, N] spread over the target's ids [n, V], -inf elsewhere (q = 0 there)."""
        full = torch.full((draft_logits.shape[0], self.head.config.vocab_size), float("-inf"))
        full[:, self._draft_to_target] = draft_logits.float().cpu()
        return full


def causal_mask(queries: int, cached: int) -> torch.Tensor | None:
    """[queries, cached + queries] bool: query i sees the cache and queries 0..i; None for one query.

    Built by hand because torch's is_causal aligns to the top left, wrong when a cache comes first."""
    if queries <= 1:
        return None
    return torch.ones(queries, cached + queries, dtype=torch.bool).tril(cached)


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask [q, kv] (True = attend) as the additive float [1, 1, q, kv] the head's layer takes."""
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)[None, None]
