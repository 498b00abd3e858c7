"""The seeds and templates behind the corpus's prompts: every family and language covered, every
field filled, passages inside their tasks."""

import random
import re
from collections import Counter

from training.self_prompts import first_turn_requests
from training.task_families import article_requests, load_seeds, passage_prompts, template_prompts

FIELD = re.compile(r"\{[a-z_0-9]+\}")


def test_template_prompts_cover_every_family_with_every_field_filled():
    seeds = load_seeds()
    prompts = template_prompts(seeds, 600, random.Random(0))
    assert set(Counter(p.family for p in prompts)) == set(seeds["templates"])
    assert not [p.text for p in prompts if FIELD.search(p.text)]
    translations = [p.text for p in prompts if p.family == "translation"]
    for language in ("French", "Spanish", "German"):
        foreign = seeds["fillers"][f"{language.lower()}_sentence"]
        assert any(f"into {language}" in t or f"in {language}?" in t for t in translations)  # to the language
        assert any(s in t for s in foreign for t in translations)  # and from it


def test_passage_tasks_hold_their_passage_and_alternate_questions_and_extraction():
    seeds = load_seeds()
    articles = [
        (r.topic, f"An article about {r.topic}, long enough to summarise.")
        for r in article_requests(seeds, 4, random.Random(0))
    ]
    prompts = passage_prompts(articles, seeds, random.Random(0))
    assert [p.family for p in prompts] == ["summarization", "passage_qa", "summarization", "extraction"] * 2
    assert all(articles[i // 2][1] in p.text and not FIELD.search(p.text) for i, p in enumerate(prompts))


def test_self_prompt_requests_cover_every_family_and_mostly_carry_an_opening():
    seeds = load_seeds()
    requests = first_turn_requests(seeds, 400, random.Random(0))
    assert set(r.family for r in requests) == set(seeds["magpie_weights"])
    assert 0.6 < sum(bool(r.opening) for r in requests) / len(requests) < 0.8
    assert all(r.system in seeds["system_prompts"]["any"] + seeds["system_prompts"][r.family] for r in requests)
