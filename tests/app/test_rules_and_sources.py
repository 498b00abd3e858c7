"""Acceptance shown as the engine computed it, by rule (greedy, a sampled chain, a sampled tree), the rule's
picture, the source of each draft, and charts whose last values are the summary's (tiny models, real runs)."""

import re

import pytest

from app import race_charts, rule_charts, views
from app.race import PLAIN, SPEC, Race, interleave
from specdec_core import GenerationConfig, ModelDrafter, SamplingConfig, autoregressive, speculative
from specdec_core.drafters.eagle import EagleDrafter, TreeShape
from specdec_core.drafters.hybrid import HybridDrafter
from specdec_core.events import ARGMAX_MATCH, HEAD, LOOKUP, RATIO, TARGET_PROB
from tests.conftest import word_tokenizer
from tests.specdec_core.drafters.conftest import VOCAB, random_head

PROMPT = [0, 5, 9, 5, 9, 5, 3, 7, 5, 9] * 2
HOT = SamplingConfig(temperature=1.0, seed=3)


def raced(target, drafter, sampling: SamplingConfig, tokens: int = 40) -> Race:
    config = GenerationConfig(max_new_tokens=tokens, sampling=sampling)
    race = Race(greedy=sampling.greedy, k=4)
    runs = {PLAIN: autoregressive(target, PROMPT, config), SPEC: speculative(target, drafter, PROMPT, config)}
    for side, event in interleave(runs):
        race.add(side, event)
    return race


@pytest.fixture(scope="module")
def text() -> views.TokenText:
    return views.TokenText(word_tokenizer([f"w{i}" for i in range(VOCAB)]))


@pytest.fixture(scope="module")
def sampled_chain(target_model, draft_model) -> Race:
    return raced(target_model, ModelDrafter(draft_model), HOT)


@pytest.fixture(scope="module")
def sampled_tree(target_model) -> Race:
    head = random_head(target_model, list(range(VOCAB)), seed=3)
    return raced(target_model, HybridDrafter(EagleDrafter(head, tree=TreeShape(width=3, max_nodes=8))), HOT)


@pytest.fixture(scope="module")
def greedy_chain(target_model, draft_model) -> Race:
    return raced(target_model, ModelDrafter(draft_model), SamplingConfig())


def hovers(pane: str) -> list[str]:
    return re.findall(r'class="tok tok-accepted[^"]*" title="([^"]*)"', pane)


def test_a_sampled_chain_shows_min_1_p_over_q_with_the_engines_numbers(sampled_chain, text):
    steps = sampled_chain.spec_steps
    assert steps and {step.rule for step in steps} == {RATIO}
    shown = hovers(views.pane_html("speculative", sampled_chain.spec, text, False))
    expected = []
    for step in steps:
        for node in step.emitted_path:
            p, q = step.target_probs[node], step.draft_probs[node]
            assert step.accept_probs[node] == pytest.approx(min(1.0, p / q), rel=1e-5)
            expected.append(f"kept with min(1, p/q)={100 * step.accept_probs[node]:.1f}%")
    assert len(shown) == len(expected) and all(e in h for e, h in zip(expected, shown, strict=True))
    detail = views.step_detail_html(steps[0], 0, len(steps), text)
    assert "<th>draft q(x)</th>" in detail and "<th>min(1, p/q)</th>" in detail


def test_a_sampled_tree_shows_p_of_x_and_says_the_heads_q_is_not_used(sampled_tree, text):
    trees = [step for step in sampled_tree.spec_steps if step.rule == TARGET_PROB]
    assert trees and all(step.accept_probs == step.target_probs for step in trees)
    shown = hovers(views.pane_html("speculative", sampled_tree.spec, text, False))
    head_nodes = [(s, n) for s in sampled_tree.spec_steps for n in s.emitted_path]
    for hover, (step, node) in zip(shown, head_nodes, strict=True):
        assert f"kept with p(x)={100 * step.target_probs[node]:.1f}%" in hover and "min(1, p/q)" not in hover
        assert ("not used" in hover) == (step.sources[node] != LOOKUP)
    step = next(s for s in trees if HEAD in s.sources)
    detail = views.step_detail_html(step, 0, 1, text)
    assert "<th>p(x)</th>" in detail and "draft q(x)" not in detail and "chosen, not drawn" in detail


def test_greedy_shows_the_argmax_match(greedy_chain, text):
    shown = hovers(views.pane_html("speculative", greedy_chain.spec, text, False))
    assert shown and all("argmax match: yes" in hover and "q=" not in hover for hover in shown)
    assert {step.rule for step in greedy_chain.spec_steps} == {ARGMAX_MATCH}


@pytest.mark.parametrize("which", ["sampled_chain", "sampled_tree"])
def test_the_rules_picture_keeps_accepted_plus_residual_mass_at_one(which, text, request):
    race = request.getfixturevalue(which)
    refused = [step for step in race.spec_steps if step.next_emitted]
    assert refused
    for step in refused[:5]:
        fig = rule_charts.rule_figure(step, text)
        kept, left = fig.layout.meta["accepted_mass"], fig.layout.meta["residual_mass"]
        assert kept and all(a + b == pytest.approx(1.0, abs=1e-5) for a, b in zip(kept, left, strict=True))
        assert fig.layout.meta["drawn"] == step.next_token
        overlap = next(t for t in fig.data if t.name and t.name.startswith("min(p, q)"))
        p = next(t for t in fig.data if t.name == "target p")
        q = next(t for t in fig.data if t.name and t.name.startswith("draft q"))
        assert list(overlap.y) == pytest.approx([min(a, b) for a, b in zip(p.y, q.y, strict=True)])


def test_the_tree_view_tells_lookup_from_head_nodes(sampled_tree, text):
    step = next(s for s in sampled_tree.spec_steps if {LOOKUP, HEAD} <= set(s.sources))
    fig = race_charts.tree_figure(step, text, 0, 1)
    symbols = [symbol for t in fig.data if t.mode == "markers+text" and t.hovertext for symbol in t.marker.symbol or ()]
    assert {"diamond", "circle"} <= set(symbols)
    assert "◆ lookup guess" in fig.layout.annotations[0].text and "● head guess" in fig.layout.annotations[0].text
    counts = views.accepted_by_source(sampled_tree)
    assert sum(counts.values()) == sum(step.accepted_count for step in sampled_tree.spec_steps)


@pytest.mark.parametrize("which", ["sampled_chain", "greedy_chain"])
def test_the_race_charts_end_at_the_summarys_values_and_name_only_drawn_series(which, request):
    race = request.getfixturevalue(which)
    fig = race_charts.race_figure(race)
    assert all(len(t.x) for t in fig.data if t.showlegend is not False)
    speedup = next(t for t in fig.data if t.xaxis == "x4")
    assert speedup.y[-1] == pytest.approx(race.speedup)
    for label, pane in (("target only", race.plain), ("speculative", race.spec)):
        rate = next(t for t in fig.data if t.name == label)
        assert rate.y[-1] == pytest.approx(pane.summary.tokens_per_second)


def test_the_summary_counts_passes_as_steps_with_a_draft_plus_plain_steps(greedy_chain):
    spec = greedy_chain.spec.summary
    drafted = len(greedy_chain.spec_steps)
    assert f"{spec.target_passes} = {drafted} + {spec.target_passes - drafted}" in views.summary_html(greedy_chain)
