"""The adaptive draft length, and the closed-form expectations it relies on."""

import random
from dataclasses import replace

import pytest

from specdec_core import expected_speedup, expected_tokens_per_step
from specdec_core.costs import CONTEXT_TOKENS, CostCurve
from specdec_core.events import ARGMAX_MATCH, LOOKUP, PlainStep, SpecStep
from specdec_core.schedule import AdaptiveDraftLength


def test_expected_tokens_limits():
    assert expected_tokens_per_step(0.0, 5) == 1.0
    assert expected_tokens_per_step(1.0, 5) == 6.0
    assert expected_tokens_per_step(0.5, 2) == pytest.approx(1.75)
    # Leviathan et al. fig. 2 style check: a=0.8, k=4, c=0.05 gives about 2.8x
    assert expected_speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8**5) / 0.2 / 1.2)


def spec_step(drafted: int, accepted: int, draft_seconds: float, verify_seconds: float) -> SpecStep:
    tokens = tuple(range(drafted))
    return SpecStep(
        tokens,
        tuple(range(-1, drafted - 1)),
        tuple(range(accepted)),
        (0.5,) * drafted,
        (0.5,) * drafted,
        (1.0,) * drafted,
        ARGMAX_MATCH,
        (LOOKUP,) * drafted,
        (),
        0,
        0.5,
        tokens[:accepted] + (0,),
        drafted,
        draft_seconds,
        verify_seconds,
    )


def k_after_accepting_everything(schedule: AdaptiveDraftLength, draft_pass_seconds: float, context: int = 100) -> int:
    """The k chosen after 100 steps whose drafts were all accepted (the acceptance prior has faded: 0.95^100), with
    a verify pass of 0.05 s for any k, behind `context` tokens."""
    for _ in range(100):
        k = schedule.next(context)
        schedule.update(spec_step(k, k, draft_seconds=draft_pass_seconds * k, verify_seconds=0.05))
    return schedule.next(context)


def test_adaptive_grows_when_drafts_are_cheap_and_accepted():
    assert k_after_accepting_everything(AdaptiveDraftLength(start=2, longest=8), draft_pass_seconds=0.001) == 8


def test_adaptive_takes_the_shortest_k_within_noise_of_the_best():
    # A self-draft: each draft pass 0.7 of a target pass. Rates rise towards k = 16 by ever
    # smaller steps; k = 7 is the shortest within 3% of the best.
    assert k_after_accepting_everything(AdaptiveDraftLength(start=4, longest=16), draft_pass_seconds=0.035) == 7


def test_adaptive_stops_drafting_when_everything_is_rejected_and_probes_rarely():
    schedule = AdaptiveDraftLength(start=4, longest=8)
    schedule.update(spec_step(4, 0, 0.1, 0.06))  # first step (prefill) teaches nothing
    for _ in range(5):
        k = schedule.next()
        if k:
            schedule.update(spec_step(k, 0, draft_seconds=0.03 * k, verify_seconds=0.06))
        else:
            schedule.update(PlainStep(1, 0.5, 0.05, (1,)))
    lengths = []
    for _ in range(300):
        k = schedule.next()
        lengths.append(k)
        if k:
            schedule.update(spec_step(k, 0, draft_seconds=0.03, verify_seconds=0.06))
        else:
            schedule.update(PlainStep(1, 0.5, 0.05, (1,)))
    probes = [i for i, k in enumerate(lengths) if k]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps) and len(probes) >= 2  # each failed probe waits longer
    # a probe costs 0.8 of a plain step more than one (0.03 + 0.06 against 0.05): it waits for enough plain steps
    # that probing costs at most PROBE_SHARE of their time
    assert min(gaps) >= 0.8 / AdaptiveDraftLength.PROBE_SHARE


def test_one_unlucky_first_draft_does_not_turn_drafting_off():
    """A first draft refused at its first token (a = 0 by itself) against a prior that fades: the head keeps
    drafting, while a draft refused step after step still turns off (the test above)."""
    schedule = AdaptiveDraftLength(start=3, longest=8, curve=CostCurve(tuple(0.05 for _ in range(17))))
    schedule.update(PlainStep(1, 0.5, 0.05, (1,)))  # prefill
    schedule.update(spec_step(3, 0, draft_seconds=0.030, verify_seconds=0.05))  # its time includes reading the prompt
    schedule.update(spec_step(schedule.next(), 2, draft_seconds=0.003, verify_seconds=0.05))
    assert schedule.next() > 0
    assert 0.3 < schedule.acceptance_rate < 0.9


def test_the_first_drafts_time_is_not_taken_as_a_draft_pass_c():
    """The first draft of a feature drafter also reads the whole prompt: a second of it says nothing of a pass."""
    schedule = AdaptiveDraftLength(start=3, longest=8, curve=CostCurve(tuple(0.05 for _ in range(17))))
    schedule.update(PlainStep(1, 0.5, 0.05, (1,)))  # prefill
    schedule.update(spec_step(3, 3, draft_seconds=3.0, verify_seconds=0.05))
    assert schedule.next() == 3


def test_adaptive_reads_the_machines_verification_cost_curve():
    """The same acceptance and draft costs: where wide passes cost little (a GPU), k grows; where
    they cost a lot (a 2-core CPU), the curve keeps k short."""
    flat = CostCurve(tuple(0.05 for _ in range(17)))
    steep = CostCurve(tuple(0.05 * (1 + 0.25 * n) for n in range(17)))
    k_flat = k_after_accepting_everything(AdaptiveDraftLength(start=2, longest=16, curve=flat), 0.004)
    k_steep = k_after_accepting_everything(AdaptiveDraftLength(start=2, longest=16, curve=steep), 0.004)
    assert k_steep < k_flat


def test_adaptive_reads_the_curve_at_the_contexts_length():
    """Flat behind a short context, steep behind a long one: the same run drafts shorter behind the long one."""
    curve = CostCurve(tuple(0.05 for _ in range(17)), tuple(0.05 * (1 + 0.25 * n) for n in range(17)))
    k_short = k_after_accepting_everything(AdaptiveDraftLength(start=2, longest=16, curve=curve), 0.004, context=100)
    k_long = k_after_accepting_everything(AdaptiveDraftLength(start=2, longest=16, curve=curve), 0.004, context=2000)
    assert k_long < k_short


def test_a_self_gating_drafters_k_never_reaches_zero_and_ignores_steps_without_draft_passes():
    """The hybrid turns its head off itself and its lookup is free: the adaptive k only sizes the head."""
    schedule = AdaptiveDraftLength(start=4, longest=8, shortest=1)
    schedule.update(spec_step(4, 0, 0.1, 0.06))  # prefill
    lengths = []
    for _ in range(20):
        k = schedule.next()
        lengths.append(k)
        schedule.update(spec_step(k, 0, draft_seconds=0.03 * k, verify_seconds=0.06))
    assert min(lengths) == 1 and lengths[-1] == 1  # as short as allowed, never off
    lookup_only = replace(spec_step(8, 8, draft_seconds=0.0, verify_seconds=0.06), draft_passes=0)
    for _ in range(10):
        schedule.update(lookup_only)  # the lookup's guesses all accepted: says nothing about the head
    assert schedule.next() == 1


def simulated_speedup(
    acceptance: float,
    curve: CostCurve,
    c: float,
    tokens: int = 96,
    seed: int = 0,
    c_at_load: float | None = None,
    reads_what_it_missed: bool = False,
) -> float:
    """Speedup over plain decoding of the adaptive schedule on text whose drafts the target accepts at random
    at `acceptance` per token, where a pass over n tokens costs curve.ratio(n) and a draft pass c,
    both in one-token target passes. reads_what_it_missed: a draft after plain steps first reads their tokens
    in one more pass over them, and its first draft the prompt's CONTEXT_TOKENS too (a separate draft model);
    else it takes the target's cache entries for them (the target's own copies). The schedule sees only the
    steps' outcomes and times, as in a run, c_at_load where given, and whether the draft reads what it missed."""
    rng, single = random.Random(seed), curve.seconds[0]
    schedule = AdaptiveDraftLength(3, 16, curve, c=c_at_load, reads_what_it_missed=reads_what_it_missed)
    schedule.update(PlainStep(1, 0.5, 1.0, (1,)))  # prefill
    made, seconds, behind = 0, 0.0, CONTEXT_TOKENS
    while made < tokens:
        k = schedule.next(CONTEXT_TOKENS + made)
        if k == 0:
            schedule.update(PlainStep(1, 0.5, single, (1,)))
            made, seconds, behind = made + 1, seconds + single, behind + 1
            continue
        accepted = next((i for i in range(k) if rng.random() >= acceptance), k)
        catch_up = single * c * curve.ratio(behind) if reads_what_it_missed and behind > 1 else 0.0
        verify, draft = single * curve.ratio(k + 1), single * c * k + catch_up
        schedule.update(spec_step(k, accepted, draft, verify))
        made, seconds, behind = made + accepted + 1, seconds + verify + draft, 1
    return made * single / seconds


# Verification cost curves measured on two CPUs, T(n)/T(1) for n = 1..17: the Intel Xeon with AMX
# (bench/RESULTS.md, 2026-12-06, commit f826bc9), dear from n = 2 on; and a 2-core AMD EPYC with AVX2 only, whose
# T(5)/T(1) of 1.55 (2026-12-07) is taken as a straight line through n = 17.
XEON = (1.0, 1.19, 1.22, 1.39, 1.39, 1.43, 1.53, 1.56, 1.63, 1.63, 1.74, 1.74, 1.83, 1.83, 1.97, 1.97, 2.08)
AVX2_EPYC = tuple(1 + 0.1375 * n for n in range(17))


def test_adaptive_k_costs_little_where_nothing_is_accepted_on_a_cpu_whose_wide_passes_are_dear():
    """T(2)/T(1) 1.19 behind a long context, so every failed one-token probe costs a fifth of a step. Drafting
    still turns off fast enough and probes rarely enough to stay within 3% of plain decoding, and pays once drafts
    are accepted."""
    curve = CostCurve(tuple(0.071 * r for r in XEON))
    assert simulated_speedup(0.0, curve, c=0.066) >= 0.97  # no draft accepted: the same run for every seed
    assert sum(simulated_speedup(0.6, curve, c=0.066, seed=seed) for seed in range(20)) / 20 > 1.2


@pytest.mark.parametrize("ratios", [XEON, AVX2_EPYC], ids=["xeon", "avx2-epyc"])
@pytest.mark.parametrize("c", [0.0, 0.066, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("reads_what_it_missed", [False, True], ids=["adopts", "reads"])
@pytest.mark.parametrize("tokens", [32, 96, 400])
def test_adaptive_k_loses_at_most_3_percent_when_every_draft_is_refused(ratios, c, reads_what_it_missed, tokens):
    """Any draft cost from free (a lookup) to a whole target pass (a bfloat16 copy on a CPU without bfloat16
    arithmetic), measured at load as the engine's drafters are; a draft that takes the target's cache entries
    for what it missed and one that reads them (a separate model); short answers and long ones."""
    curve = CostCurve(tuple(0.05 * r for r in ratios))
    speedup = simulated_speedup(0.0, curve, c, tokens, c_at_load=c, reads_what_it_missed=reads_what_it_missed)
    assert speedup >= 0.97


@pytest.mark.parametrize("ratios", [XEON, AVX2_EPYC, (1.0,) * 17], ids=["xeon", "avx2-epyc", "flat"])
def test_a_draft_as_dear_as_the_target_is_never_run_even_where_it_would_always_be_accepted(ratios):
    curve = CostCurve(tuple(0.05 * r for r in ratios))
    assert simulated_speedup(1.0, curve, c=1.0, c_at_load=1.0) == pytest.approx(1.0)


@pytest.mark.parametrize("reads_what_it_missed", [False, True], ids=["adopts", "reads"])
def test_without_its_cost_known_at_load_a_dear_draft_costs_its_first_steps(reads_what_it_missed):
    """The control for the bound above: the same refused draft as dear as the target, its c unknown until it has
    run, loses more than 3% on a short answer: what c measured at load saves."""
    curve = CostCurve(tuple(0.05 * r for r in AVX2_EPYC))
    blind = simulated_speedup(0.0, curve, c=1.0, tokens=32, reads_what_it_missed=reads_what_it_missed)
    assert blind < 0.97 <= simulated_speedup(0.0, curve, 1.0, 32, c_at_load=1.0, reads_what_it_missed=True)


@pytest.mark.parametrize("ratios", [XEON, AVX2_EPYC], ids=["xeon", "avx2-epyc"])
def test_a_cheap_accepted_draft_still_pays_with_its_cost_known_at_load(ratios):
    curve = CostCurve(tuple(0.05 * r for r in ratios))
    speedups = [simulated_speedup(0.7, curve, c=0.066, seed=seed, c_at_load=0.066) for seed in range(20)]
    assert sum(speedups) / len(speedups) > 1.2
