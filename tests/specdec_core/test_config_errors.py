"""Bad input gets a clear SpecDecError, never a crash deep in torch."""

import pytest

from specdec_core import (
    DraftConfig,
    GenerationConfig,
    NgramDrafter,
    SamplingConfig,
    SpecDecError,
    autoregressive,
    speculative,
)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: DraftConfig(k=0), "draft length k must be between 1 and 32"),
        (lambda: DraftConfig(k=10_000), "draft length k must be between 1 and 32"),
        (lambda: DraftConfig(k=2.5), "must be an integer"),
        (lambda: SamplingConfig(temperature=-0.5), "temperature must be between 0 and 100"),
        (lambda: SamplingConfig(temperature=float("nan")), "temperature must be a number"),
        (lambda: SamplingConfig(temperature="hot"), "temperature must be a number"),
        (lambda: SamplingConfig(top_p=0.0), "top_p must be in (0, 1]"),
        (lambda: SamplingConfig(top_p=1.5), "top_p must be between 0 and 1"),
        (lambda: SamplingConfig(top_k=-1), "top_k must be between 0"),
        (lambda: SamplingConfig(seed=-3), "seed must be between 0"),
        (lambda: GenerationConfig(max_new_tokens=0), "max_new_tokens must be between 1 and 256"),
        (lambda: GenerationConfig(max_new_tokens=10**9), "max_new_tokens must be between 1 and 256"),
        (lambda: GenerationConfig(max_new_tokens=True), "max_new_tokens must be an integer"),
    ],
)
def test_absurd_parameters_are_refused_with_a_message(make, message):
    with pytest.raises(SpecDecError, match=message.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
        make()


def test_empty_prompt_is_refused(target_model):
    with pytest.raises(SpecDecError, match="prompt is empty"):
        next(autoregressive(target_model, [], GenerationConfig()))


def test_prompt_longer_than_the_context_window_is_refused(target_model):
    too_long = [1] * target_model.config.max_position_embeddings
    with pytest.raises(SpecDecError, match="context window holds 256"):
        next(speculative(target_model, NgramDrafter(), too_long, GenerationConfig()))
