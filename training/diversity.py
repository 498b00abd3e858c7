"""How varied a prompt set is: distinct-n ratios, a length histogram and a keyword category count.

distinct-n is the number of distinct word n-grams over all n-grams of the set (Li et al. 2016):
a set of near-copies scores low however large it is. The categories come from a keyword
classifier, crude on purpose: it needs no model and is comparable from run to run.
"""

from __future__ import annotations

import re
from collections import Counter

from training.text_ngrams import ngrams, words

LENGTH_BINS = (5, 10, 20, 40, 80, 160, 320, 640)  # upper bounds in words; the last bin is open
# First match wins, so the specific categories come before the broad ones.
CATEGORIES = (
    ("translation", r"\btranslat|\bin (french|spanish|german|english)\b|\bhow do you say\b"),
    ("summarization", r"\bsummar|\btl;?dr\b|\bshorten\b|\bkey points\b"),
    ("code_edit", r"\b(fix|refactor|rewrite|optimi[sz]e|debug)\b.*\bcode\b|\bthis (function|code|snippet)\b"),
    ("coding", r"\b(python|javascript|sql|bash|java|c\+\+|rust|function|code|program|script|api|regex)\b"),
    ("math", r"\d+\s*[-+*/x%=]\s*\d+|\b(calculate|solve|equation|percent|how much|how many|average|area|total cost)\b"),
    ("extraction", r"\b(extract|pull out|list all|list every|find the|json)\b"),
    ("roleplay", r"\b(pretend|act as|roleplay|role-play|imagine you are|you are a|let's play)\b"),
    ("writing", r"\b(write|compose|draft|poem|story|essay|email|letter|haiku|limerick|slogan|speech)\b"),
    ("reasoning", r"\b(riddle|puzzle|logic|which is heavier|true or false|if all|who is the)\b"),
    ("advice", r"\b(should i|how do i|how can i|tips|advice|help me|what can i do)\b"),
    ("explanation", r"\b(explain|why|how does|what causes|difference between)\b"),
    ("question", r"\b(what|who|when|where|which|how)\b|\?"),
)
_PATTERNS = tuple((name, re.compile(pattern)) for name, pattern in CATEGORIES)


def category(text: str) -> str:
    lowered = text.lower()
    return next((name for name, pattern in _PATTERNS if pattern.search(lowered)), "other")


def distinct_n(texts: list[str], n: int) -> float:
    grams = [g for t in texts for g in ngrams(words(t), n)]
    return round(len(set(grams)) / max(1, len(grams)), 4)


def length_histogram(texts: list[str]) -> dict[str, int]:
    counts = Counter(next((f"<={b}" for b in LENGTH_BINS if len(words(t)) <= b), f">{LENGTH_BINS[-1]}") for t in texts)
    labels = [f"<={b}" for b in LENGTH_BINS] + [f">{LENGTH_BINS[-1]}"]
    return {label: counts.get(label, 0) for label in labels}


def report(texts: list[str]) -> dict:
    return {
        "prompts": len(texts),
        "distinct": {f"distinct-{n}": distinct_n(texts, n) for n in (1, 2, 3)},
        "length_words": length_histogram(texts),
        "categories": dict(Counter(category(t) for t in texts).most_common()),
    }
