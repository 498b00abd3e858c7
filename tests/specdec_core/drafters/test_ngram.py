"""Prompt lookup: which earlier occurrence it copies from."""

from specdec_core import SamplingConfig
from specdec_core.drafters.ngram import NgramDrafter
from specdec_core.sampling import Sampler

GREEDY = Sampler(SamplingConfig())


def lookup(context: list[int], k: int) -> tuple[int, ...]:
    return NgramDrafter().propose(context, k, GREEDY).tokens


def test_the_latest_match_wins_when_it_leaves_room_for_k_tokens():
    assert lookup([1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 7, 1, 2, 3], 3) == (5, 6, 7)


def test_a_match_inside_a_repeating_run_falls_back_to_an_earlier_one():
    # The latest occurrence of (7, 7, 7) is followed by one token only; an earlier one by k.
    assert lookup([4, 7, 7, 7, 7, 7, 7, 7], 4) == (7, 7, 7, 7)
    assert lookup([5, 6, 5, 6, 5, 6], 5) == (5, 6)  # no occurrence leaves room for 5: the longest continuation


def test_shorter_ngrams_only_when_longer_ones_never_occurred():
    assert lookup([1, 2, 8, 3, 2, 9, 3, 2], 2) == (9, 3)  # (3, 2) occurred: its continuation, not (2)'s latest
    assert lookup([1, 2, 3], 2) == ()


def test_match_is_the_longest_ngram_that_occurred_before_and_propose_continues_it():
    drafter = NgramDrafter()
    context = [1, 2, 8, 3, 2, 9, 3, 2]
    assert drafter.match(context) == 2  # (3, 2) occurred; (9, 3, 2) did not
    assert drafter.continuation(context, 2, 2) == lookup(context, 2) == (9, 3)
    assert drafter.continuation(context, 1, 2) == (9, 3)  # the latest (2) leaves room for 2 tokens too
    assert drafter.match([1, 2, 3]) == 0 and drafter.continuation([1, 2, 3], 0, 2) == ()


def test_earliest_takes_the_first_occurrence_of_the_longest_match_as_vllm_does():
    drafter = NgramDrafter(earliest=True)
    assert drafter.propose([1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 7, 1, 2, 3], 3, GREEDY).tokens == (4, 9, 1)
    assert drafter.propose([5, 6, 5, 6, 5, 6], 5, GREEDY).tokens == (5, 6)  # what follows it, even if short of k
    assert drafter.propose([1, 2, 8, 3, 2, 9, 3, 2], 2, GREEDY).tokens == (9, 3)  # the longest n first, as before
    assert drafter.propose([1, 2, 3], 2, GREEDY).tokens == ()
