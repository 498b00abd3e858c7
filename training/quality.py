"""Whether a generated text is usable: not empty, not too short or long, text rather than symbols,
no repetition loop and no chat-template markers (a small target left to sample loops and leaks)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from training.text_ngrams import ngrams, words

_MARKER = re.compile(r"<\|\w+\|>")  # <|im_start|>, <|endoftext|>, ...: the turn never ended cleanly
PARAGRAPH = "\n\n"  # what clean_prefix cuts at
_CHAR_RUN = re.compile(r"(.)\1{19,}", re.DOTALL)  # 20 of one character: "!!!!..." or "aaaa..."


@dataclass(frozen=True, slots=True)
class TextLimits:
    min_words: int = 3
    max_words: int = 300
    min_text_share: float = 0.6  # letters and digits among the non-space characters
    min_distinct_trigrams: float = 0.5  # distinct / all word 3-grams, once there are 8 or more
    max_long_ngram_repeats: int = 2  # any word 8-gram seen more often is a loop, however long the text


def defect(text: str, limits: TextLimits = TextLimits()) -> str | None:
    """Why the text is unusable, or None when it is fine."""
    tokens = words(text)
    if not text.strip():
        return "empty"
    if len(tokens) < limits.min_words:
        return "too short"
    if len(tokens) > limits.max_words:
        return "too long"
    visible = [c for c in text if not c.isspace()]
    if not _MARKER.search(text) and sum(c.isalnum() for c in visible) < limits.min_text_share * len(visible):
        return "not text"
    return _breakdown(text, tokens, limits)


def _breakdown(text: str, tokens: list[str], limits: TextLimits) -> str | None:
    """What a text breaks down into, after which a small model's text rarely recovers: a leaked marker, a loop."""
    if _MARKER.search(text):
        return "template marker"
    if _loops(tokens, limits) or _CHAR_RUN.search(text):
        return "repetition"
    return None


def clean_prefix(text: str, limits: TextLimits = TextLimits()) -> str:
    """The text's longest run of whole paragraphs from its start before a loop or a leaked marker ("" when
    the first has one); the caller judges the rest (length, share of text) on the result, as a title alone
    is no text. For passages, which need not be whole texts: the target's long sampled articles mostly
    loop after a few hundred tokens (196 of 288 never ended), and the paragraphs before the loop are
    good text (159 of those 196 kept 300 tokens or more)."""
    paragraphs = text.split(PARAGRAPH)
    kept = ""
    for n in range(1, len(paragraphs) + 1):
        candidate = PARAGRAPH.join(paragraphs[:n])
        if _breakdown(candidate, words(candidate), limits):
            break
        kept = candidate
    return kept


def _loops(tokens: list[str], limits: TextLimits) -> bool:
    trigrams = ngrams(tokens, 3)
    if len(trigrams) >= 8 and len(set(trigrams)) < limits.min_distinct_trigrams * len(trigrams):
        return True
    long = Counter(ngrams(tokens, 8))
    return bool(long) and max(long.values()) > limits.max_long_ngram_repeats
