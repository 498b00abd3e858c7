"""Draft trees: several guesses per position, verified in one target pass (SpecInfer; EAGLE-2).

A draft is a tree of N nodes given by `parents`: node i's parent is parents[i], or -1 for a child
of the root (the last context token). Parents come before their children. A chain, the only
shape most drafters make, is the tree whose every node has one child: (-1, 0, 1, ..., k-2), and
everything here treats it the same way, so there is one code path for both.

One target pass scores the whole tree when each node attends to the context and to its own
ancestors only (a 4D mask, which transformers takes as given) at position = context length - 1
+ its depth. The tree's size is chosen per step from this machine's verification cost curve
(choose_size): the number of best nodes with the most expected tokens per unit of the step's cost
(the pass over them plus the drafting), so on a CPU where wide passes are dear the tree stays small.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .costs import StepCosts


def chain(length: int) -> tuple[int, ...]:
    """Parents of a chain of `length` nodes."""
    return tuple(range(-1, length - 1))


def depths(parents: tuple[int, ...]) -> list[int]:
    """Depth of each node: 1 for children of the root."""
    result: list[int] = []
    for parent in parents:
        result.append(1 if parent < 0 else result[parent] + 1)
    return result


def children(parents: tuple[int, ...]) -> dict[int, list[int]]:
    """Children of each node in draft order; -1 is the root."""
    result: dict[int, list[int]] = {-1: []}
    for node, parent in enumerate(parents):
        result.setdefault(node, [])
        result[parent].append(node)
    return result


def ancestors_mask(parents: tuple[int, ...]) -> torch.Tensor:
    """[N, N] bool: row i is True at node i and its ancestors (what node i may attend to)."""
    n = len(parents)
    mask = torch.eye(n, dtype=torch.bool)
    for node, parent in enumerate(parents):
        if parent >= 0:
            mask[node] |= mask[parent]  # parents come first, so the parent's row is complete
    return mask


def attention_mask(parents: tuple[int, ...], tail: int, cached: int) -> torch.Tensor:
    """[1, 1, tail + N, cached + tail + N] bool, True = attend: the `tail` context tokens fed with the
    tree see the cache and each other causally; each node sees the cache, the tail and its ancestors."""
    n = len(parents)
    queries = tail + n
    mask = torch.zeros(queries, cached + queries, dtype=torch.bool)
    mask[:, :cached] = True
    mask[:, cached : cached + tail] = torch.ones(queries, tail, dtype=torch.bool).tril()  # nodes' rows: all True
    mask[tail:, cached + tail :] = ancestors_mask(parents)
    return mask[None, None]


def positions(parents: tuple[int, ...], tail: int, cached: int) -> torch.Tensor:
    """[1, tail + N] position ids: the tail continues the cache; a node sits at its depth after the tail."""
    tail_positions = list(range(cached, cached + tail))
    last = cached + tail - 1
    return torch.tensor([tail_positions + [last + d for d in depths(parents)]])


def causal_mask(queries: int, cached: int) -> torch.Tensor:
    """[queries, cached + queries] bool, True = attend: each query sees the cache and the queries up to itself.
    Built here because torch's is_causal aligns to the top left, wrong when a cache comes first."""
    return torch.ones(queries, cached + queries, dtype=torch.bool).tril(cached)


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask [q, kv] (True = attend) as the additive float [1, 1, q, kv] a decoder layer takes."""
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)[None, None]


def reindexed(parents: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    """The parents of the nodes listed in `order` (a subset or a reordering, each node's parent in it and
    before it) as positions in `order`: the tree those nodes make on their own."""
    index = {node: i for i, node in enumerate(order)}
    return tuple(-1 if parents[node] < 0 else index[parents[node]] for node in order)


def parents_first(parents: Sequence[int]) -> list[int]:
    """Node order with every parent before its children, level by level, siblings in their given order."""
    order: list[int] = []
    frontier = [n for n, p in enumerate(parents) if p < 0]
    while frontier:
        order += frontier
        frontier = [n for parent in frontier for n, p in enumerate(parents) if p == parent]
    return order


def merged(
    first: tuple[tuple[int, ...], tuple[int, ...]],
    second: tuple[tuple[int, ...], tuple[int, ...]],
) -> tuple[tuple[int, ...], tuple[int, ...], list[int], list[int]]:
    """Two trees (tokens, parents) from the same root as one, shared where a node has the same token under the same
    parent: (tokens, parents, the merged index of each of the first tree's nodes, and of the second's); the first
    tree's nodes come first at every level."""
    tokens, parents = list(first[0]), list(first[1])
    index: list[int] = []  # second tree's node -> merged node, before reordering
    for token, parent in zip(*second, strict=True):
        under = -1 if parent < 0 else index[parent]
        same = next((n for n, p in enumerate(parents) if p == under and tokens[n] == token), None)
        if same is None:
            tokens.append(token), parents.append(under)
            same = len(tokens) - 1
        index.append(same)
    order = parents_first(parents)
    position = {node: i for i, node in enumerate(order)}
    first_index = [position[n] for n in range(len(first[0]))]
    return tuple(tokens[n] for n in order), reindexed(parents, order), first_index, [position[n] for n in index]


def path_to(parents: Sequence[int], node: int) -> list[int]:
    """The nodes from the root's child down to `node`."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


@dataclass(frozen=True, slots=True)
class SideBranch:
    """Nodes verified in the same pass as a tree but outside it (the hybrid's lookup guess), and the tokens they are
    expected to add: they widen the pass, so a tree is sized with them, not as if alone."""

    nodes: int = 0
    expected_tokens: float = 0.0


def choose_size(
    scores: list[float], costs: StepCosts | None, draft_passes: int, max_nodes: int, side: SideBranch = SideBranch()
) -> int:
    """How many of the best nodes to verify (scores: each node's draft probability of being reached,
    best first; a child never outscores its parent, so any prefix of them is a connected tree).

    Expected tokens of a pass over n nodes: 1 + the sum of their scores (EAGLE-2's estimate of the
    accepted length) + what the side branch gives; its cost: costs.step(n + 1 + side.nodes,
    draft_passes), the measured curve at this context plus the drafting already spent. The n with the
    most tokens per unit of cost wins. Nodes the tree shares with the side branch are counted twice, on
    the side of a smaller tree. Without costs (a model loaded some other way), every node up to `max_nodes`."""
    count = min(len(scores), max_nodes)
    if costs is None:
        return count
    expected = 1.0 + side.expected_tokens
    best, best_rate = 0, expected / costs.step(1 + side.nodes, draft_passes)
    for n in range(1, count + 1):
        expected += scores[n - 1]
        rate = expected / costs.step(n + 1 + side.nodes, draft_passes)
        if rate > best_rate:
            best, best_rate = n, rate
    return max(best, 1) if count else 0
