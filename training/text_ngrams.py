"""Words and word n-grams of a text, after one normalisation shared by dedupe, the eval-overlap
filter and the diversity report (so "Hello, World!" and "hello world" are the same words)."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    """Lower-cased word characters; punctuation and spacing never make two texts differ."""
    return _WORD.findall(text.lower())


def normalised(text: str) -> str:
    return " ".join(words(text))


def ngrams(tokens: list[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def shingles(text: str, n: int = 3) -> set[tuple[str, ...]]:
    """Word n-grams; a text shorter than n words is one shingle, so short exact copies still match."""
    tokens = words(text)
    return set(ngrams(tokens, n)) if len(tokens) >= n else {tuple(tokens)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0
