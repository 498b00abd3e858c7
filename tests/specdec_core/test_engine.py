"""Both decoders on tiny random models: greedy losslessness, sampling losslessness, stopping."""

import copy
import time

import pytest
import torch

import specdec_core.engine as engine
from specdec_core import (
    DraftConfig,
    GenerationConfig,
    ModelDrafter,
    NgramDrafter,
    SamplingConfig,
    SpecStep,
    autoregressive,
    generated_tokens,
    speculative,
)
from specdec_core.acceptance import Verdict
from specdec_core.drafters.base import Draft, Drafter
from specdec_core.drafters.model_draft import early_exit_copy
from specdec_core.events import LOOKUP, RATIO, Step
from specdec_core.kv_cache import CachedModel
from specdec_core.limits import MAX_NEW_TOKENS
from specdec_core.sampling import Sampler
from specdec_core.tree import chain
from tests.conftest import noisy_copy, tiny_llama
from tests.specdec_core.conftest import PROMPT, assert_matches, exact_marginals


def drafters(target, draft):
    yield "draft model", lambda: ModelDrafter(draft)
    yield "n-gram", lambda: NgramDrafter()
    yield (
        "early exit, sharing the prompt cache",
        lambda: ModelDrafter(early_exit_copy(target, 1), shares_target_weights=True),
    )
    yield (
        "bfloat16 copy, sharing the prompt cache",
        lambda: ModelDrafter(copy.deepcopy(target).bfloat16(), shares_target_weights=True),
    )
    yield "the target itself", lambda: ModelDrafter(target)


@pytest.mark.parametrize("k", [1, 2, 4, 7])
@pytest.mark.parametrize("adaptive", [False, True])
def test_greedy_speculative_equals_plain_and_generate(target_model, draft_model, k, adaptive):
    config = GenerationConfig(max_new_tokens=40)
    plain = generated_tokens(autoregressive(target_model, PROMPT, config))
    reference = target_model.generate(
        torch.tensor([PROMPT]), max_new_tokens=40, do_sample=False, min_new_tokens=40, pad_token_id=0
    )[0, len(PROMPT) :].tolist()
    assert plain == reference
    for name, make in drafters(target_model, draft_model):
        events = list(speculative(target_model, make(), PROMPT, config, DraftConfig(k=k, adaptive=adaptive)))
        assert generated_tokens(events) == plain, name


def test_drafts_are_really_rejected_and_accepted(target_model, draft_model):
    """The identity test above means something only if both outcomes occur."""
    events = list(speculative(target_model, ModelDrafter(draft_model), PROMPT, GenerationConfig(max_new_tokens=60)))
    summary = events[-1].summary
    assert 0 < summary.accepted < summary.drafted


def test_target_as_its_own_draft_accepts_everything(target_model):
    events = list(speculative(target_model, ModelDrafter(target_model), PROMPT, GenerationConfig(max_new_tokens=30)))
    summary = events[-1].summary
    assert summary.acceptance_rate == 1.0
    assert all(e.next_outcome == "bonus" for e in events if isinstance(e, SpecStep))


# ---- adaptive k against drafts that cannot pay (the schedule's 3% bound: test_schedule_theory.py) ------------


class RefusedDrafter(Drafter):
    """Proposes at every position a token that greedy decoding does not choose there: every draft is refused.
    A lookup's cost: no model pass."""

    name = "always refused"

    def __init__(self, prompt: list[int], plain: list[int], vocab: int) -> None:
        self._prompt, self._plain, self._vocab = len(prompt), plain, vocab

    @property
    def c_at_load(self) -> float | None:
        return 0.0

    def propose(self, context: list[int], k: int, sampler: Sampler) -> Draft:
        wrong = (self._plain[len(context) - self._prompt] + 1) % self._vocab
        return Draft((wrong,) * k, chain(k), None, None, 0, 0.0, (LOOKUP,) * k)


def test_adaptive_k_turns_an_always_refused_draft_off(target_model):
    config = GenerationConfig(max_new_tokens=120)
    plain = generated_tokens(autoregressive(target_model, PROMPT, config))
    drafter = RefusedDrafter(PROMPT, plain, target_model.config.vocab_size)
    events = list(speculative(target_model, drafter, PROMPT, config, DraftConfig(k=4, adaptive=True)))
    assert generated_tokens(events) == plain
    steps = [e for e in events if isinstance(e, Step)]
    drafted = [isinstance(e, SpecStep) and e.drafted_count > 0 for e in steps]
    assert drafted[1] and events[-1].summary.accepted == 0  # it drafted first, and nothing was accepted
    assert sum(drafted[len(steps) // 2 :]) <= 0.1 * (len(steps) - len(steps) // 2)  # off but for rare probes


@pytest.mark.parametrize("c_at_load", [1.0, None], ids=["known at load", "unknown (control)"])
def test_adaptive_k_never_runs_a_draft_as_dear_as_the_target(target_model, c_at_load):
    """The target's own weights as its draft: always accepted, and still no gain, since each draft pass costs a
    target pass. With c known at load the draft never runs; the control, c unknown, pays for learning it."""
    config = GenerationConfig(max_new_tokens=48)
    plain = generated_tokens(autoregressive(target_model, PROMPT, config))
    drafter = ModelDrafter(copy.deepcopy(target_model), "the target's copy", shares_target_weights=True, c=c_at_load)
    events = list(speculative(target_model, drafter, PROMPT, config, DraftConfig(k=3, adaptive=True)))
    assert generated_tokens(events) == plain
    draft_passes = sum(e.draft_passes for e in events if isinstance(e, SpecStep))
    assert (draft_passes == 0) == (c_at_load is not None)


# ---- sampling: the emitted tokens follow the target's distribution -------------------------

SMALL_VOCAB = 8
SAMPLING = SamplingConfig(temperature=1.3, top_p=0.95, top_k=6)


@pytest.fixture(scope="module")
def small_pair():
    target = tiny_llama(seed=11, vocab_size=SMALL_VOCAB)
    return target, noisy_copy(target, noise=1.0, seed=12)


def sample_counts(target, draft, runs: int) -> tuple[list[int], list[int]]:
    firsts, seconds = [0] * SMALL_VOCAB, [0] * SMALL_VOCAB
    for seed in range(runs):
        config = GenerationConfig(max_new_tokens=3, sampling=SamplingConfig(**{**SAMPLING_KW, "seed": seed}))
        tokens = generated_tokens(speculative(target, ModelDrafter(draft), [1, 2, 3], config, DraftConfig(k=2)))
        firsts[tokens[0]] += 1
        seconds[tokens[1]] += 1
    return firsts, seconds


SAMPLING_KW = dict(temperature=SAMPLING.temperature, top_p=SAMPLING.top_p, top_k=SAMPLING.top_k)


def test_speculative_sampling_matches_target_distribution(small_pair):
    target, draft = small_pair
    first, second = exact_marginals(target, [1, 2, 3], SAMPLING)
    draft_first, _ = exact_marginals(draft, [1, 2, 3], SAMPLING)
    # The draft must disagree with the target for this test to mean anything.
    assert (first - draft_first).abs().sum() > 0.3
    firsts, seconds = sample_counts(target, draft, runs=1500)
    assert assert_matches(firsts, first) > 1e-3
    assert assert_matches(seconds, second) > 1e-3


def test_distribution_test_catches_always_accept(small_pair, monkeypatch):
    target, draft = small_pair

    def always_accept(draft_tokens, draft_probs, target_probs, sampler, parents=None, confidence=None):
        k = draft_tokens.shape[0]
        bonus = sampler.pick(target_probs[k])
        return Verdict(tuple(range(k)), bonus, (1.0,) * k, (1.0,) * k, (1.0,) * k, 1.0, RATIO, ())

    monkeypatch.setattr(engine, "verify", always_accept)
    first, second = exact_marginals(target, [1, 2, 3], SAMPLING)
    firsts, seconds = sample_counts(target, draft, runs=1500)
    assert min(assert_matches(firsts, first), assert_matches(seconds, second)) < 1e-6


def test_same_seed_same_tokens(target_model, draft_model):
    config = GenerationConfig(max_new_tokens=25, sampling=SamplingConfig(temperature=1.0, seed=7))
    runs = [generated_tokens(speculative(target_model, ModelDrafter(draft_model), PROMPT, config)) for _ in range(2)]
    assert runs[0] == runs[1]


# ---- stopping ---------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 8])
def test_max_new_tokens_is_never_overshot_by_the_bonus_token(target_model, k):
    for budget in (1, 2, 5, 13):
        events = list(
            speculative(
                target_model,
                ModelDrafter(target_model),
                PROMPT,
                GenerationConfig(max_new_tokens=budget),
                DraftConfig(k=k),
            )
        )
        assert len(generated_tokens(events)) == budget
        assert events[-1].summary.stop_reason == "max_new_tokens"


def test_stops_at_end_token_and_emits_nothing_after_it(target_model, draft_model):
    plain = generated_tokens(autoregressive(target_model, PROMPT, GenerationConfig(max_new_tokens=30)))
    stop = plain[6]
    cut = plain[: plain.index(stop) + 1]
    for run in (
        autoregressive(target_model, PROMPT, GenerationConfig(max_new_tokens=30), stop_token_ids={stop}),
        speculative(
            target_model,
            ModelDrafter(target_model),
            PROMPT,
            GenerationConfig(max_new_tokens=30),
            DraftConfig(k=5),
            {stop},
        ),
    ):
        events = list(run)
        assert generated_tokens(events) == cut
        assert events[-1].summary.stop_reason == "eos"


def test_context_window_bounds_generation():
    small = tiny_llama(seed=3, window=20)
    events = list(speculative(small, NgramDrafter(), PROMPT, GenerationConfig(max_new_tokens=50)))
    assert len(generated_tokens(events)) == 20 - len(PROMPT)
    assert events[-1].summary.stop_reason == "context_full"


def test_closing_the_generator_stops_work(target_model, draft_model):
    drafter = ModelDrafter(draft_model)
    run = speculative(target_model, drafter, PROMPT, GenerationConfig(max_new_tokens=200))
    next(run)
    run.close()
    passes = drafter._model.passes
    with pytest.raises(StopIteration):
        next(run)
    assert drafter._model.passes == passes


def test_time_limit_stops_the_run(target_model, monkeypatch):
    """The deadline is checked after every step: a run out of time ends at the next step boundary."""
    forward = CachedModel.forward
    monkeypatch.setattr(CachedModel, "forward", lambda self, *a, **kw: (time.sleep(0.002), forward(self, *a, **kw))[1])
    config = GenerationConfig(max_new_tokens=MAX_NEW_TOKENS, max_seconds=0.001)  # each step takes 2 ms or more
    events = list(autoregressive(target_model, PROMPT, config))
    assert events[-1].summary.stop_reason == "time_limit"
    assert len(events) == 2  # one step, then Finished
