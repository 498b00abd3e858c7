"""The corpus's filters: near-duplicates, degenerate text, and overlap with evaluation prompts."""

import json
import random
import re
from pathlib import Path

import pytest

from training.dedupe import distinct
from training.draft_data import build_prompts
from training.eval_overlap import OverlapFilter
from training.quality import TextLimits, clean_prefix, defect

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def overlap():
    return OverlapFilter()


def eval_texts(name):
    return [json.loads(line)["text"] for line in (ROOT / "assets" / "eval" / name).read_text().splitlines()]


def test_dedupe_drops_a_near_duplicate_and_keeps_the_first():
    text = (
        "What is the best way to keep basil growing on a sunny kitchen windowsill "
        "through the whole winter season without extra lamps?"
    )
    near = text.replace("whole", "entire")
    other = "Explain how a bicycle gear system works and why lower gears make climbing easier."
    assert distinct([text, other, near, text.upper(), "hi there", "Hi there!"]) == [0, 1, 4]


def test_dedupe_keeps_texts_that_only_share_a_template():
    texts = [
        f"Write a haiku about {topic}."
        for topic in ("the first snowfall", "a busy harbour at dawn", "my grandmother's kitchen")
    ]
    assert distinct(texts) == [0, 1, 2]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   \n ", "empty"),
        ("Hello there", "too short"),
        ("word " * 400, "too long"),
        ("Tell me a joke<|im_end|>\n<|im_start|>assistant", "template marker"),
        ("?? !! ... ### ?? !! ... ### $$ %% ^^ && ** (( )) a b c", "not text"),
        ("I like it a lot. " * 12, "repetition"),
        (
            "Write a story about a dragon who loves tea and cakes "
            + "and cakes and cakes and cakes and cakes and cakes and cakes",
            "repetition",
        ),
        ("Can you help me with thisssssssssssssssssssssssss", "repetition"),
    ],
)
def test_degenerate_text_is_dropped(text, reason):
    assert defect(text) == reason


@pytest.mark.parametrize(
    "text",
    [
        "How do I get my sourdough starter to rise more before baking?",
        "What is 23 * 47 + 12?",
        "Fix this code:\n\ndef add(a, b):\n    return a - b",
        "Traduis en anglais : Le musée ferme à dix-huit heures le dimanche.",
    ],
)
def test_ordinary_prompts_pass(text):
    assert defect(text) is None


def test_long_passages_pass_with_passage_limits():
    vocabulary = sorted(set(re.findall(r"[a-z]+", (ROOT / "assets" / "corpus_seeds.json").read_text())))
    article = " ".join(random.Random(0).choices(vocabulary, k=600))  # long, varied, no loop
    assert defect(article) == "too long" and defect(article, TextLimits(max_words=3000)) is None


def test_a_passage_keeps_its_paragraphs_up_to_the_first_loop():
    vocabulary = sorted(set(re.findall(r"[a-z]+", (ROOT / "assets" / "corpus_seeds.json").read_text())))
    rng = random.Random(1)
    paragraphs = [" ".join(rng.choices(vocabulary, k=60)) for _ in range(3)]
    loop = "the river keeps flowing past the old mill and " * 6
    limits = TextLimits(min_words=1, max_words=3000)
    text = "\n\n".join([*paragraphs, loop, paragraphs[0]])
    assert defect(text, limits) == "repetition"
    assert clean_prefix(text, limits) == "\n\n".join(paragraphs)
    assert clean_prefix("\n\n".join(paragraphs), limits) == "\n\n".join(paragraphs)  # a clean text stays whole
    assert clean_prefix(loop + "\n\n" + paragraphs[0], limits) == ""
    titled = "**Owls**\n\n" + paragraphs[1]  # half of the title is asterisks
    assert (
        clean_prefix(titled, limits) == titled and defect(titled, limits) is None
    )  # a title alone is judged with its text


def test_evaluation_prompts_are_caught_copied_wrapped_or_lightly_paraphrased(overlap):
    prompt = eval_texts("realistic_heldout.jsonl")[0]
    assert overlap.overlap(prompt.upper() + "!!") == "realistic_heldout"
    assert overlap.overlap(f"Please help with the following. {prompt} Thank you so much.") == "realistic_heldout"
    assert overlap.overlap(prompt.replace("fridge", "refrigerator")) == "realistic_heldout"
    spec = eval_texts("spec_bench.jsonl")[-1]
    assert overlap.overlap(spec[: len(spec) // 2]) == "spec_bench"  # half of a long benchmark prompt


def test_workloads_and_draft_data_held_out_split_are_caught(overlap):
    workloads = json.loads((ROOT / "assets" / "workloads.json").read_text())
    assert overlap.overlap(workloads["creative"]["prompts"][0]["text"]) == "workloads"
    held_out = build_prompts("heldout")[0].text
    assert overlap.overlap(held_out) == "draft_heldout"
    assert (
        overlap.overlap("Why do glaciers move, and why are there no rainforests near them?") == "draft_heldout"
    )  # a held-out topic


def test_unrelated_prompts_and_draft_data_training_prompts_pass(overlap):
    assert overlap.overlap("How do I get my sourdough starter to rise more before baking?") is None
    train = build_prompts("train")
    assert sum(overlap.overlap(p.text) is None for p in train) > 0.98 * len(train)
