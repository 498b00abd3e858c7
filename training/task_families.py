"""The corpus's task families: templates from assets/corpus_seeds.json with seeded fillers.

They cover what the target's users ask for and a small model rarely invents by itself: writing,
roleplay, reasoning, math word problems (random numbers), coding, code edits (real snippets),
extraction, STEM and humanities questions, factual QA, translation to and from French, Spanish
and German (real sentences), and summaries, questions and extraction over a passage that the
target wrote itself (an article on a topic, see article_requests).
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass
from pathlib import Path

SEEDS = Path(__file__).resolve().parent.parent / "assets" / "corpus_seeds.json"
# Numeric fields: (low, high, step). Counts stay small, amounts round, percentages in fives.
NUMBERS = {
    "a": (2, 60, 1),
    "b": (2, 60, 1),
    "c": (2, 12, 1),
    "k": (2, 5, 1),
    "big": (100, 5000, 10),
    "pct": (5, 95, 5),
    "words": (400, 800, 100),
    "short_words": (40, 80, 10),
}


@dataclass(frozen=True, slots=True)
class FamilyPrompt:
    family: str
    text: str


@dataclass(frozen=True, slots=True)
class ArticleRequest:
    topic: str
    text: str  # the instruction that makes the target write a passage on the topic


def load_seeds(path: Path = SEEDS) -> dict:
    return json.loads(path.read_text())


def fill(template: str, fillers: dict[str, list[str]], rng: random.Random, given: dict[str, str] | None = None) -> str:
    """The template with each field drawn once: given values first, then numbers, then fillers."""
    values: dict[str, str] = dict(given or {})
    for _, field, _, _ in string.Formatter().parse(template):
        if field is None or field in values:
            continue
        if field in NUMBERS:
            low, high, step = NUMBERS[field]
            values[field] = str(rng.randrange(low, high + 1, step))
        else:
            values[field] = rng.choice(fillers[field])
    return template.format(**values)


def template_prompts(seeds: dict, count: int, rng: random.Random) -> list[FamilyPrompt]:
    """`count` prompts, the families in turn so each gets an equal share."""
    families = sorted(seeds["templates"])
    prompts = []
    for i in range(count):
        family = families[i % len(families)]
        prompts.append(FamilyPrompt(family, fill(rng.choice(seeds["templates"][family]), seeds["fillers"], rng)))
    return prompts


def article_requests(seeds: dict, count: int, rng: random.Random) -> list[ArticleRequest]:
    topics = seeds["fillers"]["article_topic"]
    requests = []
    for i in range(count):
        topic = topics[i % len(topics)]  # every topic before any repeats
        requests.append(
            ArticleRequest(
                topic, fill(rng.choice(seeds["article_prompts"]), seeds["fillers"], rng, {"article_topic": topic})
            )
        )
    return requests


def passage_prompts(passages: list[tuple[str, str]], seeds: dict, rng: random.Random) -> list[FamilyPrompt]:
    """Two prompts per (topic, passage): a summary, then in turn a question about it or an extraction."""
    templates = seeds["passage_templates"]
    prompts = []
    for i, (topic, passage) in enumerate(passages):
        question = rng.choice(seeds["fillers"]["passage_question"]).format(topic=topic)
        given = {"passage": passage, "topic": topic, "passage_question": question}
        for family in ("summarization", ("passage_qa", "extraction")[i % 2]):
            prompts.append(FamilyPrompt(family, fill(rng.choice(templates[family]), seeds["fillers"], rng, given)))
    return prompts
