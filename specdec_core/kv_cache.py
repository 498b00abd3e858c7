"""A causal LM with its own KV cache: the one place that knows about positions and rollback."""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from .compiled_pass import CompiledPasses, compiled_passes
from .errors import SpecDecError
from .lean_pass import run_pass
from .static_pass import head_dim
from .tree import attention_mask, positions

MIN_ROOM = 256  # positions a growing buffer holds at first (with_room); when full it grows to twice what is asked


def with_room(buffer: torch.Tensor, kept: int, end: int, dim: int) -> torch.Tensor:
    """`buffer` if it holds `end` positions along `dim`; else a new buffer with room for twice that (at least
    MIN_ROOM) starting with a copy of the first `kept`. Appending into it copies only what is new, where
    concatenating copies everything so far (the KV cache below, the EAGLE drafter's features)."""
    if buffer.shape[dim] >= end:
        return buffer
    shape = list(buffer.shape)
    shape[dim] = max(MIN_ROOM, 2 * end)
    room = buffer.new_empty(shape)
    room.narrow(dim, 0, kept).copy_(buffer.narrow(dim, 0, kept))
    return room


class GrowingLayer(DynamicLayer):
    """transformers' DynamicLayer, but appending writes into a buffer with room to grow instead of
    concatenating: DynamicLayer copies the whole cache on every pass, a cost that grows with the context
    (bench/RESULTS.md, 2026-12-03, AMD EPYC (AVX-512)). keys and values stay views of the buffer's first
    positions, so crop and every reader see what DynamicLayer would show them. Written by hand: transformers'
    StaticCache preallocates too, but cannot crop (rollback) and fixes the length in advance.

    room: positions the first buffer holds; a compiled pass (compiled_pass.py) reads and writes buffers of
    exactly its static length, so a cache made for one starts with that room."""

    def __init__(self, room: int = MIN_ROOM) -> None:
        super().__init__()
        self.first_room = room

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        # zeroed, not empty: a compiled pass reads the whole buffer (masked), and masking cannot undo a NaN that
        # uninitialised memory may hold (NaN + -inf is NaN)
        self.room = tuple(
            states.new_zeros((*states.shape[:-2], self.first_room, states.shape[-1]))
            for states in (key_states, value_states)
        )
        self.keys, self.values = (buffer[..., :0, :] for buffer in self.room)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        end = length + key_states.shape[-2]
        self.room = keys, values = tuple(with_room(buffer, length, end, dim=-2) for buffer in self.room)
        keys[..., length:end, :].copy_(key_states)
        values[..., length:end, :].copy_(value_states)
        self.keys, self.values = keys[..., :end, :], values[..., :end, :]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keeps the batch rows at `indices` (a batch whose ended rows leave it, training/generation.py), in the
        buffer too: DynamicLayer's would replace keys and values and leave the buffer's rows stale."""
        if self.is_initialized:
            length = self.get_seq_length()
            self.room = tuple(buffer[indices] for buffer in self.room)
            self.keys, self.values = (buffer[..., :length, :] for buffer in self.room)

    def compact_rows(self, start: int, rows: torch.Tensor) -> None:
        """Compacts the positions from `start` on to those at start + rows (ascending), written back into the
        buffer right after the prefix, which stays where it is: a tree step moves only the pass's rows, not the
        whole cache (bench/RESULTS.md, 2026-12-04, AMD EPYC (AVX-512))."""
        index = start + rows
        keys, values = self.keys.index_select(-2, index), self.values.index_select(-2, index)
        self.keys, self.values = self.keys[..., :start, :], self.values[..., :start, :]  # views of the buffer
        self.update(keys, values)


def growing_cache(model: PreTrainedModel, room: int = MIN_ROOM) -> DynamicCache:
    """transformers' DynamicCache for the model, its plain layers GrowingLayers with `room` positions at first."""
    cache = DynamicCache(config=model.config)
    cache.layers = [GrowingLayer(room) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def static_cache(model: PreTrainedModel, length: int) -> DynamicCache:
    """A growing cache whose layers start with buffers of `length` positions, allocated now: what a compiled pass
    reads and writes (until a context past `length` grows them and the lean pass takes over)."""
    cache = growing_cache(model, room=length)
    config = model.config
    empty = torch.empty(1, config.num_key_value_heads, 0, head_dim(config), dtype=torch.float32, device=model.device)
    for layer in cache.layers:
        layer.lazy_initialization(empty, empty)
    return cache


class CachedModel:
    """Feeds tokens to a model whose cache holds a prefix of the context.

    Positions come from the cache length, so after `rollback` the next `forward`
    continues exactly where the kept prefix ends (the off-by-one of transformers #30042
    cannot happen here: there is no separate position counter to forget).
    """

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.device = model.device
        # read once: every pass of one run goes through the same passes, even if compiled ones arrive meanwhile
        self.compiled: CompiledPasses | None = compiled_passes(model)
        self.cache = static_cache(model, self.compiled.plan.length) if self.compiled else growing_cache(model)
        self.passes = 0

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def forward(
        self, token_ids: list[int], logits_to_keep: int = 1, parents: tuple[int, ...] | None = None
    ) -> torch.Tensor:
        """Appends token_ids to the cache; returns float32 logits [logits_to_keep, V] for the last positions.

        parents: the last len(parents) tokens are a draft tree (tree.py), each attending to
        the context and its own ancestors only; the tokens before them continue the context."""
        return self._forward(token_ids, logits_to_keep, (), parents)[0]

    def forward_with_features(
        self,
        token_ids: list[int],
        layers: tuple[int, ...],
        logits_to_keep: int = 1,
        parents: tuple[int, ...] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """As forward, plus the hidden states [len(token_ids), len(layers) * H] of the numbered layers (from 0;
        -1 the last), side by side (the last layer's before the final norm): what a feature drafter
        (drafters/eagle.py, HeadConfig.layers) reads."""
        logits, features = self._forward(token_ids, logits_to_keep, layers, parents)
        return logits, features

    @torch.inference_mode()
    def _forward(
        self, token_ids: list[int], logits_to_keep: int, layers: tuple[int, ...], parents: tuple[int, ...] | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        self.passes += 1
        width = self._compiled_width(len(token_ids), layers)
        if width is not None:
            return self._compiled_forward(token_ids, logits_to_keep, parents, width)
        input_ids = torch.tensor([token_ids], device=self.device)
        tree = {}
        if parents:  # a 4D mask and explicit positions, which transformers uses as given
            tail, cached = len(token_ids) - len(parents), self.length
            tree = {
                "attention_mask": attention_mask(parents, tail, cached).to(self.device),
                "position_ids": positions(parents, tail, cached).to(self.device),
            }
        logits, features = run_pass(
            self.model, input_ids, self.cache, logits_to_keep=logits_to_keep, feature_layers=layers, **tree
        )
        return logits[0].float().cpu(), features[0].float().cpu() if layers else None

    def _compiled_width(self, tokens: int, layers: tuple[int, ...]) -> int | None:
        """The compiled bucket for this pass, or None where the lean pass runs: no compiled passes, a context or a
        pass past them, a cache grown past their length, feature layers they do not output."""
        if self.compiled is None:
            return None
        plan, count = self.compiled.plan, self.model.config.num_hidden_layers
        if layers and sorted({i % count for i in layers}) != sorted(i % count for i in plan.feature_layers):
            return None
        if self.cache.layers[0].room[0].shape[-2] != plan.length:
            return None
        return self.compiled.width_for(tokens, self.length)

    def _compiled_forward(
        self, token_ids: list[int], logits_to_keep: int, parents: tuple[int, ...] | None, width: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        kv = [buffer for layer in self.cache.layers for buffer in layer.room]
        cached = self.length
        logits, features = self.compiled.run(kv, token_ids, cached, parents, width)
        end = cached + len(token_ids)
        for layer in self.cache.layers:
            layer.keys, layer.values = (buffer[..., :end, :] for buffer in layer.room)
        return logits[-logits_to_keep:], features

    @torch.inference_mode()  # the buffers may be inference tensors (made or grown in a pass), written in place
    def adopt(self, source: CachedModel, length: int) -> None:
        """Extends this cache to `length` positions with another model's entries for them (those past its own
        length), instead of computing them.

        Only for a draft that runs the target's own weights (a cheaper-dtype copy, or its first
        layers): its keys and values are the target's, up to rounding, so the target's are cast instead of
        recomputed: the prompt, a prefill the draft would otherwise pay on every run, and the tokens of plain
        steps taken without drafting, which a draft probing again would otherwise read first. Any draft q stays
        exact for the acceptance rule, so this changes speed, never the output distribution.
        """
        dtype, start = next(self.model.parameters()).dtype, self.length
        if length <= start:
            return
        for i in range(len(self.cache.layers)):
            keys, values = source.cache.layers[i].keys, source.cache.layers[i].values
            self.cache.update(keys[..., start:length, :].to(dtype), values[..., start:length, :].to(dtype), i)

    @torch.inference_mode()  # the buffers may be inference tensors, written in place
    def compact(self, start: int, rows: list[int]) -> None:
        """KV compaction after a tree step: of the positions from `start` on, keeps only `rows` (the
        fed context tail and the accepted path), moved to sit right after the kept prefix. The cache
        then equals one computed over those tokens alone: each kept entry saw only its ancestors."""
        if rows == list(range(len(rows))):  # a chain's path is already a prefix: nothing moves
            self.rollback(start + len(rows))
            return
        kept = torch.tensor(rows, dtype=torch.long, device=self.device)
        for layer in self.cache.layers:
            if type(layer) is not GrowingLayer:  # sliding windows drop entries: a moved one could be gone
                raise SpecDecError("Draft trees need a model whose cache keeps every position (no sliding window).")
            layer.compact_rows(start, kept)

    def rollback(self, length: int) -> None:
        """Drops cached positions past `length`: the rejected drafts. No recomputation of the kept prefix."""
        extra = self.length - length
        if extra > 0:
            self.cache.crop(-extra)
