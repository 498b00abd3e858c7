"""Event invariants: the per-step records add up, and the summary agrees with them."""

import pytest

from specdec_core import (
    DraftConfig,
    Finished,
    GenerationConfig,
    ModelDrafter,
    NgramDrafter,
    PlainStep,
    SamplingConfig,
    SpecStep,
    autoregressive,
    per_position_acceptance,
    speculative,
)

PROMPT = [0, 5, 9, 5, 9, 5, 3, 7, 5, 9]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("adaptive", [False, True])
def test_step_records_and_summary_agree(target_model, draft_model, temperature, adaptive):
    config = GenerationConfig(max_new_tokens=50, sampling=SamplingConfig(temperature=temperature, seed=3))
    events = list(
        speculative(target_model, ModelDrafter(draft_model), PROMPT, config, DraftConfig(k=4, adaptive=adaptive))
    )
    *steps, finished = events
    assert isinstance(finished, Finished)
    summary = finished.summary
    for step in steps:
        if isinstance(step, SpecStep):
            assert 0 <= step.accepted_count <= step.drafted_count
            assert step.accepted_count + step.rejected_count == step.drafted_count
            assert (step.rejected_token is None) == (step.rejected_count == 0)
            assert (
                step.emitted_tokens
                == (step.draft_tokens[: step.accepted_count] + (step.next_token,))[: len(step.emitted_tokens)]
            )
            assert len(step.draft_probs) == len(step.target_probs) == len(step.accept_probs) == step.drafted_count
            assert step.draft_seconds >= 0 and step.verify_seconds > 0
            assert step.next_outcome == ("correction" if step.rejected_token is not None else "bonus")
        else:
            assert isinstance(step, PlainStep)
    assert summary.tokens == sum(len(s.emitted_tokens) for s in steps) == 50
    assert summary.target_passes == len(steps)
    assert summary.drafted == sum(s.drafted_count for s in steps)
    assert summary.accepted == sum(s.accepted_count for s in steps)
    assert summary.acceptance_rate == pytest.approx(summary.accepted / summary.drafted)
    # tokens per target pass = accepted + 1 per pass (the bonus/correction token is counted)
    assert summary.mean_accepted_length == pytest.approx(
        (summary.accepted + summary.target_passes) / summary.target_passes
    )
    assert sum(summary.accepted_length_counts) == sum(1 for s in steps if s.drafted_count)
    assert sum(n * c for n, c in enumerate(summary.accepted_length_counts)) == summary.accepted
    assert summary.draft_passes == sum(s.draft_passes for s in steps)
    assert summary.seconds == pytest.approx(sum(s.seconds for s in steps))


def test_plain_run_has_one_pass_per_token(target_model):
    *steps, finished = list(autoregressive(target_model, PROMPT, GenerationConfig(max_new_tokens=12)))
    assert len(steps) == finished.summary.tokens == finished.summary.target_passes == 12
    assert finished.summary.acceptance_rate is None
    assert finished.summary.mean_accepted_length == 1.0


def test_ngram_drafts_come_from_the_context(target_model):
    events = list(
        speculative(target_model, NgramDrafter(), PROMPT, GenerationConfig(max_new_tokens=30), DraftConfig(k=3))
    )
    context = list(PROMPT)
    for step in events[:-1]:
        if step.drafted_count:
            assert step.draft_probs is None  # no q: the rule treats the guess as one-hot
            drafted = list(step.draft_tokens)
            assert any(context[i : i + len(drafted)] == drafted for i in range(len(context)))
        context += list(step.emitted_tokens)


def test_per_position_acceptance_counts_each_position(target_model, draft_model):
    steps = list(speculative(target_model, ModelDrafter(draft_model), PROMPT, GenerationConfig(max_new_tokens=40)))[:-1]
    rates = per_position_acceptance(steps)
    first = [s for s in steps if s.drafted_count]
    assert rates[0] == pytest.approx(sum(s.accepted_count >= 1 for s in first) / len(first))
    assert all(0.0 <= r <= 1.0 for r in rates)
