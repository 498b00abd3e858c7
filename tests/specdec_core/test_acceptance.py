"""The acceptance rule on hand-built probability tables."""

import pytest
import torch
from scipy.stats import chisquare

from specdec_core.acceptance import verify
from specdec_core.config import SamplingConfig
from specdec_core.events import ARGMAX_MATCH, RATIO, TARGET_PROB
from specdec_core.sampling import Sampler

GREEDY = SamplingConfig()


def table(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def test_greedy_perfect_match_accepts_all_and_adds_bonus():
    target = table([0.1, 0.9, 0, 0], [0, 0, 0.8, 0.2], [0.7, 0.1, 0.1, 0.1])
    verdict = verify(torch.tensor([1, 2]), None, target, Sampler(GREEDY))
    assert verdict.accepted_count == 2
    assert verdict.next_token == 0  # bonus = argmax of the last row
    assert verdict.accept_probs == (1.0, 1.0)


def test_greedy_early_mismatch_is_corrected_by_target_argmax():
    target = table([0.1, 0.9, 0, 0], [0, 0, 0.8, 0.2], [0.7, 0.1, 0.1, 0.1])
    verdict = verify(torch.tensor([1, 3]), None, target, Sampler(GREEDY))
    assert verdict.accepted_count == 1
    assert verdict.next_token == 2
    assert verdict.accept_probs == (1.0, 0.0)
    assert verdict.target_token_probs == pytest.approx((0.9, 0.2))


def test_sampling_accepts_surely_when_target_agrees_more_than_draft():
    target = table([0.0, 1.0, 0.0], [0.2, 0.3, 0.5])
    draft = table([0.5, 0.5, 0.0])
    for seed in range(20):
        verdict = verify(torch.tensor([1]), draft, target, Sampler(SamplingConfig(temperature=1.0, seed=seed)))
        assert verdict.accepted_count == 1
        assert verdict.accept_probs == (1.0,)


def test_sampling_rejects_token_target_never_emits_and_resamples_residual():
    target = table([0.0, 0.25, 0.75], [1 / 3, 1 / 3, 1 / 3])
    draft = table([1.0, 0.0, 0.0])
    for seed in range(20):
        verdict = verify(torch.tensor([0]), draft, target, Sampler(SamplingConfig(temperature=1.0, seed=seed)))
        assert verdict.accepted_count == 0
        assert verdict.next_token in (1, 2)  # norm(max(0, p - q)) puts no mass on token 0


def _first_token_counts(target: torch.Tensor, draft_probs: torch.Tensor | None, propose, trials: int) -> list[int]:
    counts = [0] * target.shape[1]
    for seed in range(trials):
        sampler = Sampler(SamplingConfig(temperature=1.0, seed=seed))
        token = propose(sampler)
        verdict = verify(torch.tensor([token]), draft_probs, target, sampler)
        first = token if verdict.accepted_count else verdict.next_token
        counts[first] += 1
    return counts


P = table([0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25])
Q = table([0.1, 0.2, 0.3, 0.4])


@pytest.mark.parametrize("kind", ["model draft", "one-hot draft (n-gram)"])
def test_first_token_follows_target_distribution(kind):
    if kind == "model draft":
        counts = _first_token_counts(P, Q, lambda s: s.pick(Q[0]), trials=4000)
    else:  # an n-gram guess is a fixed token with no q
        counts = _first_token_counts(P, None, lambda s: 3, trials=4000)
    expected = (P[0] * sum(counts)).tolist()
    assert chisquare(counts, expected).pvalue > 1e-3


def test_first_token_test_catches_always_accept():
    """The same test has the power to see a broken rule: always accepting emits q, not p."""
    counts = [0] * 4
    for seed in range(4000):
        counts[Sampler(SamplingConfig(temperature=1.0, seed=seed)).pick(Q[0])] += 1
    expected = (P[0] * 4000).tolist()
    assert chisquare(counts, expected).pvalue < 1e-6


# ---- the rule each verdict names, and what it keeps for the rule's picture ------------------------------


def sampled(seed: int) -> Sampler:
    return Sampler(SamplingConfig(temperature=1.0, seed=seed))


def test_a_sampled_chain_is_judged_by_min_1_p_over_q_and_its_masses_sum_to_one():
    target = table([0.1, 0.6, 0.3, 0.0], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1])
    draft = table([0.2, 0.2, 0.6, 0.0], [0.0, 0.0, 0.0, 1.0])
    for seed in range(30):
        verdict = verify(torch.tensor([2, 3]), draft, target, sampled(seed))
        assert verdict.rule == RATIO
        assert verdict.accept_probs == pytest.approx((0.5, 0.25))  # min(1, 0.3 / 0.6), min(1, 0.25 / 1)
        for judgement in verdict.judgements:
            for trial in judgement.trials:
                assert trial.accepted_mass + trial.residual_mass == pytest.approx(1.0)
        root = verdict.judgements[0].trials[0]
        assert root.accepted_mass == pytest.approx(0.1 + 0.2 + 0.3)  # sum of min(p, q) over the vocabulary
        assert root.accept_prob == pytest.approx(0.5) and root.accepted == (0 in verdict.path)
        last = verdict.judgements[-1]
        assert last.drawn == verdict.next_token and last.left and sum(last.left) <= 1.0 + 1e-6
        if not verdict.path:  # refused at the root: the draw came from norm(max(0, p - q)) = (0, 1, 0, 0)
            assert verdict.next_token == 1 and last.left[last.shown.index(1)] == pytest.approx(1.0)


def test_a_chosen_tree_is_judged_by_p_and_each_sibling_meets_what_the_one_before_left():
    # root p = (0.5, 0.3, 0.2, 0); two chosen guesses at the root: token 0, then token 1
    target = table([0.5, 0.3, 0.2, 0.0], [1, 0, 0, 0], [1, 0, 0, 0])
    confidence = torch.tensor([0.9, 0.05])  # the head's q: shown, never used by the rule
    refused_first = 0
    for seed in range(40):
        verdict = verify(torch.tensor([0, 1]), None, target, sampled(seed), (-1, -1), confidence)
        assert verdict.rule == TARGET_PROB
        assert verdict.accept_probs == pytest.approx((0.5, 0.3))  # p(x), not min(1, p/q)
        assert verdict.draft_token_probs == pytest.approx((0.9, 0.05))
        trials = verdict.judgements[0].trials
        assert trials[0].accept_prob == pytest.approx(0.5) and trials[0].accepted_mass == pytest.approx(0.5)
        if len(trials) == 2:  # the first was refused: token 0 struck out, p renormalised to (0, 0.6, 0.4, 0)
            refused_first += 1
            assert trials[1].accept_prob == pytest.approx(0.6)
            assert trials[1].p[verdict.judgements[0].shown.index(1)] == pytest.approx(0.6)
            assert trials[1].accepted_mass + trials[1].residual_mass == pytest.approx(1.0)
    assert 0 < refused_first < 40


def test_greedy_verdicts_name_the_argmax_match():
    target = table([0.1, 0.9, 0, 0], [0, 0, 0.8, 0.2], [0.7, 0.1, 0.1, 0.1])
    verdict = verify(torch.tensor([1, 3]), None, target, Sampler(GREEDY))
    assert verdict.rule == ARGMAX_MATCH
    assert [judgement.node for judgement in verdict.judgements] == [-1, 0]
    assert verdict.judgements[-1].drawn == 2 and verdict.judgements[-1].trials[0].accepted is False
