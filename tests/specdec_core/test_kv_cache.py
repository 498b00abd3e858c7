"""KV rollback: after dropping rejected drafts, the cache behaves as if they were never fed."""

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from specdec_core import ModelDrafter, SamplingConfig
from specdec_core.kv_cache import MIN_ROOM, CachedModel, GrowingLayer
from specdec_core.sampling import Sampler


def fresh_logits(model, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0, -1].float()


def test_logits_after_rollback_equal_a_fresh_pass(target_model):
    context = [0, 4, 8, 15, 16, 23]
    rejected = [42 % 32, 7, 9]
    cached = CachedModel(target_model)
    cached.forward(context[:-1])
    cached.forward([context[-1]] + rejected, logits_to_keep=4)
    cached.rollback(len(context) + 1)  # keep the first draft, drop two
    kept = context + rejected[:1]
    assert cached.length == len(kept)
    after = cached.forward([3])[0]
    torch.testing.assert_close(after, fresh_logits(target_model, kept + [3]), rtol=1e-4, atol=1e-4)


def test_full_acceptance_keeps_the_whole_cache(target_model):
    cached = CachedModel(target_model)
    cached.forward([1, 2, 3, 4, 5], logits_to_keep=5)
    cached.rollback(5)
    assert cached.length == 5
    torch.testing.assert_close(
        cached.forward([6])[0], fresh_logits(target_model, [1, 2, 3, 4, 5, 6]), rtol=1e-4, atol=1e-4
    )


def test_draft_model_cache_rolls_back_to_the_accepted_prefix(target_model, draft_model):
    sampler = Sampler(SamplingConfig())
    drafter = ModelDrafter(draft_model)
    context = [0, 3, 6, 9]
    first = drafter.propose(context, 4, sampler)
    drafter.observe(1)  # the second draft was rejected; the target corrected it to 11
    context = context + [first.tokens[0], 11]
    second = drafter.propose(context, 1, sampler)
    expected = torch.softmax(fresh_logits(draft_model, context), dim=-1)
    torch.testing.assert_close(second.probs[0], expected, rtol=1e-4, atol=1e-5)
    assert second.passes == 1  # the catch-up tokens rode along in the same pass


def test_model_drafter_stops_when_unsure(draft_model):
    sampler = Sampler(SamplingConfig())
    confident = ModelDrafter(draft_model).propose([0, 3, 6, 9], 6, sampler)
    top = float(confident.probs.max(dim=-1).values.min())  # the least confident position
    unsure = ModelDrafter(draft_model, min_confidence=top + 1e-6).propose([0, 3, 6, 9], 6, sampler)
    assert len(unsure.tokens) < len(confident.tokens) == 6
    assert unsure.tokens == confident.tokens[: len(unsure.tokens)]


@pytest.mark.parametrize("first", [0, 3], ids=["at once", "in two parts"])
def test_adopted_prompt_cache_gives_the_same_logits_as_reading_the_prompt(target_model, first):
    """At the start (the prompt), or extending a cache that holds a prefix (the tokens of plain steps a draft
    missed)."""
    prompt = [0, 4, 8, 15, 16, 23, 42 % 32]
    target = CachedModel(target_model)
    target.forward(prompt)
    adopted = CachedModel(target_model)
    adopted.adopt(target, first)
    assert adopted.length == first
    adopted.adopt(target, len(prompt))
    torch.testing.assert_close(adopted.forward([5])[0], fresh_logits(target_model, prompt + [5]), rtol=1e-4, atol=1e-4)


def test_a_draft_adopts_into_buffers_its_own_passes_made(target_model):
    """A draft's cache first made (or grown) by its own pass holds inference tensors; adopting the target's
    entries then writes into them."""
    prompt = [0, 4, 8, 15, 16, 23]
    target, draft = CachedModel(target_model), CachedModel(target_model)
    draft.forward(prompt[:2])  # its buffers made inside a pass
    target.forward(prompt + [5, 6])
    draft.adopt(target, target.length)
    torch.testing.assert_close(
        draft.forward([7])[0], fresh_logits(target_model, prompt + [5, 6, 7]), rtol=1e-4, atol=1e-4
    )


def test_growing_layer_holds_what_transformers_dynamic_layer_holds():
    """Appends past the first buffer (it grows), crops and compactions: the same keys and values as
    DynamicLayer's concatenations, and appending after a crop overwrites the dropped positions."""
    generator = torch.Generator().manual_seed(0)
    ours, theirs = GrowingLayer(), DynamicLayer()
    for step in range(60):
        width = int(torch.randint(1, 17, (1,), generator=generator))
        keys, values = (
            torch.randn(1, 2, width, 4, generator=generator),
            torch.randn(1, 2, width, 4, generator=generator),
        )
        for layer in (ours, theirs):
            layer.update(keys, values)
        if step % 3 == 1:
            for layer in (ours, theirs):
                layer.crop(-(width // 2))
        if step % 7 == 5:
            length = theirs.get_seq_length()
            start, rows = length - 6, torch.tensor([1, 4])
            index = torch.cat([torch.arange(start), start + rows])
            buffer = ours.room[0].data_ptr()
            ours.compact_rows(start, rows)
            assert ours.room[0].data_ptr() == buffer  # compacted in place: the prefix was not copied elsewhere
            theirs.keys, theirs.values = theirs.keys.index_select(-2, index), theirs.values.index_select(-2, index)
        assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values)
    assert ours.get_seq_length() > MIN_ROOM and ours.room[0].shape[-2] > MIN_ROOM  # it grew
    assert ours.keys.data_ptr() == ours.room[0].data_ptr()  # and still appends in place


def test_growing_layer_drops_batch_rows_as_transformers_dynamic_layer_does():
    """A batch whose ended rows leave it (training/generation.py): after each drop, appending goes on into the
    kept rows of the buffer, never into the stale rows of the one before."""
    generator = torch.Generator().manual_seed(1)
    ours, theirs = GrowingLayer(), DynamicLayer()
    rows = 5
    for step in range(40):
        keys, values = (
            torch.randn(rows, 2, 3 if step == 0 else 1, 4, generator=generator),
            torch.randn(rows, 2, 3 if step == 0 else 1, 4, generator=generator),
        )
        for layer in (ours, theirs):
            layer.update(keys, values)
        if step in (4, 17, 30):
            kept = torch.tensor([n for n in range(rows) if n != step % rows])
            for layer in (ours, theirs):
                layer.batch_select_indices(kept)
            rows -= 1
        assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values)
    assert ours.keys.shape[0] == 2 and ours.keys.data_ptr() == ours.room[0].data_ptr()
