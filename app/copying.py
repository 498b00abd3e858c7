"""Whether an answer mostly copies its prompt: the share of the answer's word 4-grams found in the prompt.

Speculation is cheap where the answer repeats the prompt (n-gram lookup finds it), so a large speedup on such
an answer measures lookup, not the task: a small model asked to translate German may answer with the German.
Words, not tokens, so that the flag reads the same whatever tokenizer (or serving engine) produced the text.
"""

from __future__ import annotations

import re

NGRAM = 4  # words per n-gram
COPY_THRESHOLD = 0.5  # above this share of its 4-grams found in the prompt, an answer mostly copies it
COPY_RULE = (
    f"Copied: the share of the output's word {NGRAM}-grams (lower case, punctuation dropped) that also occur in "
    f"the prompt; above {COPY_THRESHOLD:.0%} the output mostly copies the prompt, and its speedup measures lookup "
    "of the prompt rather than the task."
)
_WORD = re.compile(r"\w+")


def copy_share(output: str, prompt: str) -> float | None:
    """Of the output's word 4-grams (each occurrence counted), the share that occur in the prompt; None when
    the output has fewer than 4 words."""
    grams = _ngrams(output)
    if not grams:
        return None
    in_prompt = set(_ngrams(prompt))
    return sum(gram in in_prompt for gram in grams) / len(grams)


def copies_prompt(share: float | None) -> bool:
    return share is not None and share > COPY_THRESHOLD


def _ngrams(text: str) -> list[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return [tuple(words[i : i + NGRAM]) for i in range(len(words) - NGRAM + 1)]
