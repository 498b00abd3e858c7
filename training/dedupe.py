"""Near-duplicate removal: word 3-gram shingles, Jaccard >= 0.7 with an earlier kept text drops a text.

Comparing every pair is quadratic in the tens of thousands of generated prompts, so MinHash with
LSH banding proposes the candidates (32 bands of 4 rows: a pair at Jaccard 0.7 shares a band with
probability 0.9998) and the exact Jaccard of the shingle sets decides.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from training.text_ngrams import jaccard, shingles

_PRIME = (1 << 31) - 1  # (a * x + b) mod p stays inside uint64 for a, x < 2^31


@dataclass(frozen=True, slots=True)
class DedupeRule:
    threshold: float = 0.7
    n: int = 3
    bands: int = 32
    rows: int = 4
    seed: int = 0


def distinct(texts: list[str], rule: DedupeRule = DedupeRule()) -> list[int]:
    """Indices of the texts kept, in order: the first of each group of near-duplicates stays."""
    rng = np.random.default_rng(rule.seed)
    a = rng.integers(1, _PRIME, rule.bands * rule.rows, dtype=np.uint64)
    b = rng.integers(0, _PRIME, rule.bands * rule.rows, dtype=np.uint64)
    buckets: list[dict[bytes, list[int]]] = [{} for _ in range(rule.bands)]
    sets: list[set] = []
    kept: list[int] = []
    for index, text in enumerate(texts):
        sets.append(shingles(text, rule.n))
        signature = _minhash(sets[-1], a, b)
        keys = [signature[band * rule.rows : (band + 1) * rule.rows].tobytes() for band in range(rule.bands)]
        candidates = {other for band, key in enumerate(keys) for other in buckets[band].get(key, ())}
        if any(jaccard(sets[index], sets[other]) >= rule.threshold for other in candidates):
            continue
        kept.append(index)
        for band, key in enumerate(keys):
            buckets[band].setdefault(key, []).append(index)
    return kept


def _minhash(shingle_set: set, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    hashed = np.array([_hash(s) for s in shingle_set], dtype=np.uint64)
    return ((a[:, None] * hashed[None, :] + b[:, None]) % _PRIME).min(axis=1)


def _hash(shingle: tuple[str, ...]) -> int:
    """A hash that is the same in every process (Python's hash() of a str is salted per run)."""
    return int.from_bytes(hashlib.blake2b("\x1f".join(shingle).encode(), digest_size=4).digest(), "little") % _PRIME
