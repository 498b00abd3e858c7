"""The target's features for training sequences, recomputed from their token ids by one teacher-forced
pass: the shards keep ids only (small enough to commit), the features (about 1 KB a token and layer in
float16 for SmolLM2-135M) are made where the head is trained."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from transformers import PreTrainedModel

from training.draft_data import Sequence, hidden_states
from training.shards import Record


def sequences(model: PreTrainedModel, records: list[Record], layers: tuple[int, ...] = (), batch_tokens: int = 16_384) -> Iterator[Sequence]:
    """draft_data Sequences of corpus records, a length-sorted batch at a time (a corpus larger than memory
    can be streamed). layers: what the head reads, () for the last layer (EAGLE-1)."""
    return featurized(model, ((torch.tensor(r.prompt + r.response), len(r.prompt)) for r in records), layers, batch_tokens)


def with_layers(model: PreTrainedModel, data: list[Sequence], layers: tuple[int, ...], batch_tokens: int = 16_384) -> list[Sequence]:
    """The same sequences, in the same order, with the features of other layers (the last layer's kept as
    their targets)."""
    out = list(featurized(model, ((s.tokens, s.prompt_length) for s in data), layers, batch_tokens))
    by_length = sorted(range(len(data)), key=lambda i: len(data[i].tokens))  # featurized's order (a stable sort)
    ordered: list[Sequence | None] = [None] * len(data)
    for rank, i in enumerate(by_length):
        ordered[i] = out[rank]
    return ordered


@torch.inference_mode()
def featurized(model: PreTrainedModel, items: Iterable[tuple[torch.Tensor, int]], layers: tuple[int, ...], batch_tokens: int) -> Iterator[Sequence]:
    """(tokens, prompt length) pairs as Sequences, in order of length, batch by batch."""
    batch: list[tuple[torch.Tensor, int]] = []
    for item in sorted(items, key=lambda item: len(item[0])):
        if batch and (len(batch) + 1) * len(item[0]) > batch_tokens:
            yield from _featurize(model, batch, layers)
            batch = []
        batch.append(item)
    if batch:
        yield from _featurize(model, batch, layers)


def _featurize(model: PreTrainedModel, batch: list[tuple[torch.Tensor, int]], layers: tuple[int, ...]) -> list[Sequence]:
    count, size = model.config.num_hidden_layers, model.config.hidden_size
    read = sorted({i % count for i in (*layers, -1)})  # the last layer's output always: the targets
    hidden = hidden_states(model, [t.to(model.device) for t, _ in batch], tuple(read))

    def block(h: torch.Tensor, layer: int) -> torch.Tensor:
        at = read.index(layer % count) * size
        return h[:, at : at + size]

    out = []
    for (tokens, length), h in zip(batch, hidden):
        h = h.cpu()
        features = torch.cat([block(h, layer) for layer in layers], dim=-1) if layers else block(h, -1).clone()
        out.append(Sequence(tokens.cpu(), length, features, block(h, -1).clone() if layers else None))
    return out
