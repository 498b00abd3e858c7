"""Drafting with an EAGLE head (eagle_head.py): a chain of k head passes, or an EAGLE-2 tree (Li et al. 2024,
arXiv 2406.16858) k levels deep, one head pass per level.

The first pass reads the target's real features, the next ones the head's own predicted feature (EAGLE's
chain), on the head's own KV cache. The engine hands the drafter the target's features after every target
pass (observe_features), so entries computed from predictions are replaced by real ones once the target has
verified them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from ..costs import CostCurve
from ..events import HEAD
from ..kv_cache import with_room
from ..limits import MEASURED_DRAFT_TOKENS
from ..sampling import Sampler
from ..tree import SideBranch, additive_mask, causal_mask, chain, choose_size, depths, path_to, reindexed
from .base import Draft, Drafter
from .eagle_head import EagleHead


@dataclass(frozen=True, slots=True)
class TreeShape:
    """An EAGLE-2 draft tree: `width` candidates per expanded node and `width` nodes expanded per level,
    over the draft length k levels; tree.choose_size then keeps at most `max_nodes` of the best nodes."""

    width: int = 3
    max_nodes: int = MEASURED_DRAFT_TOKENS


class EagleDrafter(Drafter):
    """Drafts with an EagleHead, the first pass from the target's real features: a chain of k head
    passes, or (with a TreeShape) an EAGLE-2 tree k levels deep, one head pass per level."""

    def __init__(
        self,
        head: EagleHead,
        name: str = "EAGLE head",
        tree: TreeShape | None = None,
        curve: CostCurve | None = None,
        c: float = 0.0,
    ) -> None:
        """curve and c (one head pass over one target pass): this machine's, measured at load (tuning.py); they
        size the tree."""
        self.name = name
        self.head = head
        self.tree = tree
        self._curve = curve
        self._c = c
        self._cache = head.new_cache()
        self._real_entries = 0  # head cache entries computed from real target features
        # The features as the head reads them, by position, in a buffer with room to grow: concatenating would copy
        # every position on each step.
        self._features = with_room(
            torch.empty(0, head.config.hidden_size, dtype=head.feature_scale.dtype, device=head.device), 0, 1, dim=0
        )
        self._draft_to_target = head.draft_to_target.cpu()

    @property
    def c_at_load(self) -> float | None:
        return self._c or None  # 0.0: not measured

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.head.config.layers

    def observe_features(self, start: int, features: torch.Tensor) -> None:
        """The target's features [n, F] (feature_layers side by side) for positions start..start+n-1 of its
        latest pass, kept as the head reads them."""
        with torch.inference_mode():
            read = self.head.input_features(features.to(self.head.device))
            end = start + len(read)
            self._features = with_room(self._features, start, end, dim=0)
            self._features[start:end] = read

    @torch.inference_mode()
    def propose(self, context: list[int], k: int, sampler: Sampler, side: SideBranch = SideBranch()) -> Draft:
        """side: nodes verified in the same pass outside this draft (the hybrid's lookup branch): a tree is sized
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
        predicted = self._run(
            self._features[start:real_end],
            context[start + 1 : real_end + 1],
            positions,
            causal_mask(real_end - start, start) if real_end - start > 1 else None,
        )[-1:]
        self._real_entries = real_end
        draft = (
            self._chain(predicted, real_end, k, sampler)
            if self.tree is None
            else self._tree(predicted, real_end, k, sampler, side)
        )
        return Draft(*draft, seconds=time.perf_counter() - started, sources=(HEAD,) * len(draft[0]))

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

    def _tree(self, predicted: torch.Tensor, real_end: int, depth: int, sampler: Sampler, side: SideBranch) -> tuple:
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
                head_entry[node] = cached + row
                for ancestor in path_to(parents, node):  # every expanded ancestor's entry, and its own
                    mask[row, head_entry[ancestor]] = True
            features = torch.stack([node_feature[parents[node]] for node in frontier])
            positions = torch.full((len(frontier),), real_end + level - 1)
            out = self._run(features, [tokens[node] for node in frontier], positions, mask)
            node_feature.update(zip(frontier, out))
            first_new = len(tokens)
            add_children(frontier, out)
            new = range(first_new, len(tokens))
            frontier = sorted(new, key=lambda n: -log_scores[n])[:width]
        return self._best_nodes(tokens, parents, log_scores, confidence, passes=depth, context=real_end + 1, side=side)

    def _best_nodes(
        self, tokens, parents, log_scores, confidence, passes: int, context: int, side: SideBranch
    ) -> tuple:
        """The nodes worth verifying on this machine behind `context` tokens (tree.choose_size), parents first."""
        # Best first; a child never outscores its parent, and depth breaks ties, so any prefix is a tree.
        depth = depths(tuple(parents))
        ranked = sorted(range(len(tokens)), key=lambda n: (-log_scores[n], depth[n]))
        scores = [math.exp(log_scores[n]) for n in ranked]
        costs = None if self._curve is None else self._curve.step_costs(context, self._c)
        count = choose_size(scores, costs, passes, self.tree.max_nodes, side)
        kept = sorted(ranked[:count], key=lambda n: (depth[n], n))
        return (
            tuple(tokens[n] for n in kept),
            reindexed(parents, kept),
            None,
            torch.tensor([confidence[n] for n in kept]),
            passes,
        )

    def _q(self, predicted: torch.Tensor, sampler: Sampler) -> torch.Tensor:
        """The draft distribution [n, V] over the target's ids from predicted features [n, H]."""
        return sampler.probs(self._full_vocab(self.head.logits(predicted)))

    def _tree_q(self, predicted: torch.Tensor, sampler: Sampler) -> torch.Tensor:
        """The same distribution over the draft vocabulary only [n, N] (index i: target id draft_to_target[i]).
        A tree keeps no draft rows (its children are chosen, not drawn: q is one-hot for the rule), so it ranks
        here: the same probabilities as _q's at the draft ids (q is zero elsewhere, and the warpers keep the
        same tokens), with the softmax and top-k over N ids instead of V (bench/RESULTS.md, 2026-12-06, Intel Xeon
        with AMX)."""
        return sampler.probs(self.head.logits(predicted).float().cpu())

    def _run(
        self, features: torch.Tensor, tokens: list[int], positions: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
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
